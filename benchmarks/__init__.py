"""Reproducible overhead benchmark: fake upstream on loopback, bare aiohttp proxy as the yardstick,
the gateway with every feature on; see README.md here."""

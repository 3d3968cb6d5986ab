"""What the process runs on: the config file format, the embedded default config, the shared timer
wheel and the one use of aiohttp's private parts (``aiohttp_tuning``). Imports nothing of ours but
the core, so adapters and backends may use it."""

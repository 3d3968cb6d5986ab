"""What the process runs on: the config file format, the embedded default config, the shared timer
wheel and the one module that relies on libraries' internals (``internals``). Imports nothing of ours but
the core, so adapters and backends may use it."""

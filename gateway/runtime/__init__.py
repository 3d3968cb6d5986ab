"""What the process runs on: the config file format, the embedded default config and the shared
timer wheel. Imports nothing of ours but the core, so adapters and backends may use it."""

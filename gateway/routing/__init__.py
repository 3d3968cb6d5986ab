"""Where a request goes: the model table, dispatch with fallbacks before the first byte, and the
fan-out of per-choice seeds."""

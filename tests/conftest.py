"""Fixtures every tier may use: the virtual clock (``tests/support/clock.py``)."""

pytest_plugins = ["tests.support.clock"]

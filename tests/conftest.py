"""What every test tier shares: the virtual clock (``tests/support/clock.py``), and each test begins
with the log throttles' memory empty, so a line one test caused does not hold back the same line in
the next (``gateway/runtime/throttle.py``); and Hypothesis never judges a test by wall-clock time, since
the machines are small and shared (a per-example deadline or a "too slow" health check is a margin)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from gateway.runtime.throttle import forget_all

pytest_plugins = ["tests.support.clock"]

settings.register_profile("shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared-machine")


@pytest.fixture(autouse=True)
def _fresh_log_throttles() -> None:
    forget_all()

"""What every test tier shares: each test begins with the log throttles' memory empty, so a line one
test caused does not hold back the same line in the next (``gateway/runtime/throttle.py``)."""

from __future__ import annotations

import pytest

from gateway.runtime.throttle import forget_all


@pytest.fixture(autouse=True)
def _fresh_log_throttles() -> None:
    forget_all()

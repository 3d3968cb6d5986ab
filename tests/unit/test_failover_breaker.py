"""The Redis breaker's outage ends with the breaker (``gateway/limits/failover.py``): a call sent
before it opened that answers while it is open does not say Redis is back while the failure policy
still refuses, so the outage's line counts every request the policy took."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from gateway.limits.failover import FailoverLimiter
from gateway.limits.local import LocalLimiter
from gateway.obs.metrics import REDIS_STATE


def test_an_answer_while_the_breaker_is_open_does_not_end_the_outage(caplog: pytest.LogCaptureFixture) -> None:
    limiter = FailoverLimiter(cast(Any, None), LocalLimiter(), {"bud": "closed"}, retry_seconds=3600)
    caplog.set_level(logging.WARNING, "gateway.limits")
    limiter._failed(TimeoutError("Redis round trip over 0.05 s"))
    limiter._answered(0)  # the late answer of a call in flight when the other timed out
    limiter.outage.refused += 2  # what the policy refused meanwhile (as ``admit`` counts them)
    assert not limiter.up and limiter.outage.since is not None and REDIS_STATE.n == 0
    assert not any("answers again" in r.getMessage() for r in caplog.records)
    limiter.down_until = 0.0  # the breaker's time is over (no clock: set, not waited for)
    limiter._answered(0)
    (line,) = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
    assert "2 refused" in line and limiter.outage.since is None and REDIS_STATE.n == 1

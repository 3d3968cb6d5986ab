"""Throttled log lines (``gateway/runtime/throttle.py``): a flood of one kind is a line a period, the
lines held back counted in the next one; kinds apart, and the kinds remembered bounded."""

from __future__ import annotations

import logging

import pytest

from gateway.runtime import throttle
from gateway.runtime.throttle import LogThrottle


def test_a_flood_of_one_kind_is_one_line_a_period_and_the_next_counts_the_rest(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(throttle.time, "monotonic", lambda: now[0])
    t = LogThrottle(logging.getLogger("gateway.test"), every=30.0)
    written = [t.warning("bad", "bad body from %s", "x") for _ in range(1000)]
    assert written.count(True) == 1
    assert t.warning("other", "another kind") is True
    now[0] += 30.0
    assert t.warning("bad", "bad body from %s", "x") is True
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bad body from x", "another kind", "bad body from x (999 more like it in the last 30 s)"]


def test_the_kinds_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    t = LogThrottle(logging.getLogger("gateway.test"))
    for i in range(throttle.MAX_KINDS * 3):
        t.warning(f"kind-{i}", "line")
    assert len(t.last) <= throttle.MAX_KINDS and len(t.held) <= throttle.MAX_KINDS

"""A request's deadline is on the event loop's clock, the one its time bounds are filed on: uvloop's
lags time.monotonic() by up to a coarse clock tick and a busy loop turn, and a bound that fired at the
deadline, judged on the other clock, saw milliseconds left and blamed the upstream (504 where a
Friendli client's own timeout answers 429; a clean-clone CI run under load did)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.errors import DeadlineExceeded, UpstreamTimeout
from gateway.core.request import InternalRequest, Operation
from gateway.core.upstream import Call
from gateway.limits.admission import Admission, Settings
from gateway.limits.local import LocalLimiter
from tests.support.clock import hang

REQUEST = InternalRequest(Operation.COMPLETION, "m", prompts=("hi",), timeout=0.25)


async def test_deadlines_are_set_and_read_on_the_loops_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    now = [1000.0]  # a loop clock far from time.monotonic()'s
    monkeypatch.setattr(loop, "time", lambda: now[0])
    deadline = Admission(LocalLimiter(), {}, Settings()).deadline_for("team", REQUEST)
    assert deadline == 1000.25
    call = Call("rid", deadline)
    now[0] = 1000.25  # a bound filed for the remaining time comes due: nothing is left
    assert call.remaining() == 0.0


async def test_a_bound_filed_for_the_remaining_time_finds_none_left_when_it_fires() -> None:
    call = Call("rid", Admission(LocalLimiter(), {}, Settings()).deadline_for("team", REQUEST))
    remaining = call.remaining()
    assert remaining is not None
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(remaining):
            await hang()
    left = call.remaining()
    assert left is not None and left <= 0.001


async def test_a_fired_bound_is_the_deadline_only_when_none_of_it_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    now = [50.0]
    monkeypatch.setattr(loop, "time", lambda: now[0])
    call = Call("rid", 51.0)
    assert call.hop(5.0) == 1.0  # a hop's timeout is cut to what is left
    assert isinstance(call.timed_out("t", "no output"), UpstreamTimeout)  # a second left: the target's
    now[0] = 50.9995  # within the millisecond a bound cut to the deadline may fire early by
    assert isinstance(call.timed_out("t", "no output"), DeadlineExceeded)
    now[0] = 51.0
    with pytest.raises(DeadlineExceeded):
        call.hop(5.0)
    assert Call("rid").hop(5.0) == 5.0  # no deadline: the hop's own

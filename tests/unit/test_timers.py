"""Upstream call bounds on one shared wheel: they fire late by at most a grain, never early, never after
their block has ended, and many bounds share one loop timer. On a virtual clock (``tests/support/clock``):
"at most a grain late" holds exactly, however busy the machine."""

from __future__ import annotations

import asyncio

import pytest

from gateway.runtime.timers import MIN_GRAIN, Bound, Wheel
from tests.support.clock import VirtualClock, hang


@pytest.fixture
async def w(clock: VirtualClock) -> Wheel:
    """The test's own wheel, on its loop (an upstream or a Redis channel owns one in the gateway)."""
    return Wheel(asyncio.get_running_loop())


async def test_a_block_past_its_bound_is_cancelled_as_a_timeout(w: Wheel) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(TimeoutError), Bound(0.05, w):
        await hang()
    took = loop.time() - began
    assert 0.05 <= took <= 0.05 + MIN_GRAIN


async def test_a_block_within_its_bound_is_untouched_and_the_bound_is_gone_after_it(
    w: Wheel, clock: VirtualClock
) -> None:
    with Bound(0.05, w):
        await clock.advance(0.01)
    await clock.advance(0.1)  # past the bound: a stale bound would cancel this task here
    assert not w._slots


async def test_reschedule_moves_the_bound_from_now(w: Wheel, clock: VirtualClock) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(TimeoutError), Bound(0.05, w) as bound:
        await clock.advance(0.03)
        bound.reschedule(0.1)
        await hang()
    assert loop.time() - began >= 0.13


async def test_a_cancellation_from_outside_stays_a_cancellation(w: Wheel, clock: VirtualClock) -> None:
    async def bounded() -> None:
        with Bound(5, w):
            await hang()

    task = asyncio.create_task(bounded())
    await clock.advance(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_error_inside_the_block_is_not_turned_into_a_timeout(w: Wheel) -> None:
    with pytest.raises(KeyError), Bound(5, w):
        raise KeyError("x")


async def test_many_bounds_share_one_loop_timer_armed_for_the_earliest(w: Wheel) -> None:
    first = Bound(0.2, w)
    with first:
        handle = w._handle
        assert handle is not None
        for _ in range(50):  # later bounds: filed, no timer of their own
            with Bound(0.3, w):
                assert w._handle is handle
        with Bound(0.05, w):  # an earlier one re-arms the one timer
            assert w._handle is not handle


async def test_concurrent_bounds_each_fire_for_their_own_task_only(w: Wheel, clock: VirtualClock) -> None:
    async def work(seconds: float, bound: float) -> str:
        try:
            with Bound(bound, w):
                await clock.advance(seconds)
        except TimeoutError:
            return "timeout"
        return "done"

    results = await asyncio.gather(*(work(0.1 if i % 2 else 0.01, 0.05) for i in range(20)))
    assert results == ["done", "timeout"] * 10


async def test_a_bound_moved_later_stays_in_its_slot_until_that_comes_due(w: Wheel, clock: VirtualClock) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(TimeoutError), Bound(0.05, w) as bound:
        due = bound._due
        bound.reschedule(0.2)  # later: not moved yet
        assert bound._due == due and sum(map(len, w._slots.values())) == 1
        await clock.advance(0.1)  # its old slot came due: re-filed, not fired
        assert bound._due > due
        await hang()
    assert 0.2 <= loop.time() - began <= 0.2 + MIN_GRAIN


async def test_a_bound_moved_sooner_is_moved_at_once(w: Wheel) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(TimeoutError), Bound(5, w) as bound:
        bound.reschedule(0.05)
        await hang()
    assert 0.05 <= loop.time() - began <= 0.05 + MIN_GRAIN

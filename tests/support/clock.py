"""A virtual clock for tests of time itself (bounds, idle watches, deadlines): the running loop's time
moves only when every task waits, and then straight to the next timer that is due. A test of a 50 ms
bound then takes no wall-clock time, and no load on the machine can stretch or squeeze it.

Only for tests that do no real IO: while every task waits, the clock jumps ahead instead of waiting for
a socket. ``hang()`` is the deliberate hang such tests cut with a bound; it fails, loudly, if the bound
never cuts it."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.support.waiting import HANG_GUARD

TURN = 1e-6  # seconds a turn of the loop takes on the virtual clock


class VirtualClock:
    """Replaces ``loop.time`` and the loop's selector wait while installed."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.now = 0.0
        self._select: Callable[..., list[tuple[selectors.SelectorKey, int]]] = loop._selector.select  # type: ignore[attr-defined]

    def time(self) -> float:
        return self.now

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """What is ready now; if nothing is and a timer is due later, the clock moves to it. Every turn
        of the loop takes a microsecond, so a loop that spins (a timer re-armed in the past) still
        sees time pass, as it would on a real clock."""
        ready = self._select(0)
        self.now += TURN if ready or not timeout else timeout
        return ready if ready or timeout is not None else self._select(None)

    async def advance(self, seconds: float) -> None:
        """Lets ``seconds`` of virtual time pass, every timer due meanwhile firing in its order."""
        arrived = self.loop.create_future()
        self.loop.call_at(self.now + seconds, arrived.set_result, None)
        await arrived


async def hang() -> None:
    """A deliberate hang: returns never; a bound around it must cut it (cancel it) within ``HANG_GUARD``."""
    try:
        async with asyncio.timeout(HANG_GUARD):
            await asyncio.Event().wait()
    except TimeoutError:
        raise AssertionError(f"a deliberate hang was not cut by its bound within {HANG_GUARD:g} s") from None


@pytest.fixture
async def clock() -> AsyncIterator[VirtualClock]:
    """The running loop on a virtual clock for the rest of the test."""
    loop = asyncio.get_running_loop()
    virtual = VirtualClock(loop)
    saved: dict[str, Any] = {"time": loop.time}
    loop.time = virtual.time  # type: ignore[method-assign]
    loop._selector.select = virtual.select  # type: ignore[attr-defined]
    try:
        yield virtual
    finally:
        loop.time = saved["time"]  # type: ignore[method-assign]
        loop._selector.select = virtual._select  # type: ignore[attr-defined]

"""``eventually``: the one way a test waits for something another task, thread or process does.

It polls a condition until it holds. The bound is a hang guard, not a margin: a test that passes does
not depend on it (the condition simply holds sooner or later), and a test that would hang fails instead,
naming what it waited for and the condition's last value. Where the time itself is what a test checks
(``before the lease expires``), it passes ``within`` and says so.

These two polls are the suite's only sleeps besides deliberate hangs and tests of time itself (each
commented where it stands)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

T = TypeVar("T")
HANG_GUARD: Final = 60.0  # seconds; far beyond anything a passing test waits, on any machine
FIRST, LAST = 0.002, 0.05  # polling steps: quick at first (most waits are short), then gentler


def _failure(what: str, within: float, last: object) -> AssertionError:
    return AssertionError(f"never happened within {within:g} s: {what} (last seen: {last!r})")


async def eventually(condition: Callable[[], T | Awaitable[T]], what: str, *, within: float = HANG_GUARD) -> T:
    """Waits until ``condition()`` (sync or async) returns something truthy, and returns it."""
    loop = asyncio.get_running_loop()
    deadline, step, last = loop.time() + within, FIRST, None
    while True:
        value = condition()
        last = await value if inspect.isawaitable(value) else value
        if last:
            return last  # type: ignore[return-value]
        if loop.time() > deadline:
            raise _failure(what, within, last)
        await asyncio.sleep(step)
        step = min(step * 2, LAST)


def eventually_blocking(condition: Callable[[], T], what: str, *, within: float = HANG_GUARD) -> T:
    """``eventually`` for code outside an event loop (fixtures that start servers, the benchmarks)."""
    deadline, step = time.monotonic() + within, FIRST
    while not (last := condition()):
        if time.monotonic() > deadline:
            raise _failure(what, within, last)
        time.sleep(step)
        step = min(step * 2, LAST)
    return last


async def turn() -> None:
    """One turn of the event loop, no clock: every callback ready now (a task just created, a future
    just resolved) runs before this returns."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done

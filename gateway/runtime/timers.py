"""Time bounds on upstream calls and Redis round trips without a loop timer per call.

Every call is bounded (first byte, total, idle; a Redis round trip) and almost every call ends long
before its bound. A loop timer per bound (``asyncio.timeout``) costs a timer handle made, armed,
cancelled and reaped per call (docs/performance.md). Here the bounds of one owner (an upstream, a
Redis channel) share a ``Wheel``: each is filed in the slot of its due time, rounded *up* to a grain
of 0.1% of its length (at least 10 ms), and removed from it when its call ends: a set insert and
discard. One loop timer is armed for the earliest slot and re-armed only when
it fires, so a busy gateway wakes for it about once per bound length, not once per request.

A bound fires up to its grain late, never early. What expiry does is the holder's: ``Bound`` cancels
its task and turns that into ``TimeoutError`` at the block's exit, as ``asyncio.timeout`` does.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from types import TracebackType
from typing import Protocol

MIN_GRAIN = 0.01  # seconds
GRAIN_SHARE = 0.001  # of a bound's length


class Expiring(Protocol):
    def expire(self) -> None: ...


class Wheel:
    """The bounds of one owner on one event loop, by due slot; see the module docstring."""

    __slots__ = ("_armed", "_handle", "_queued", "_slots", "_ticks", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._slots: dict[float, set[Expiring]] = {}
        self._ticks: list[float] = []  # due times with a slot (or once with one): a heap
        self._queued: set[float] = set()  # what _ticks holds, so a slot refilled is not pushed twice
        self._armed = math.inf  # when the loop timer fires
        self._handle: asyncio.TimerHandle | None = None

    def add(self, item: Expiring, when: float, length: float) -> float:
        """File ``item`` to expire at ``when`` (loop time) or up to a grain later; returns its slot."""
        grain = length * GRAIN_SHARE
        if grain < MIN_GRAIN:
            grain = MIN_GRAIN
        due = math.ceil(when / grain) * grain
        slot = self._slots.get(due)
        if slot is None:
            slot = self._slots[due] = set()
            if due not in self._queued:
                self._queued.add(due)
                heapq.heappush(self._ticks, due)
            if due < self._armed:
                self._arm(due)
        slot.add(item)
        return due

    def discard(self, item: Expiring, due: float) -> None:
        slot = self._slots.get(due)
        if slot is not None:
            slot.discard(item)
            if not slot:
                del self._slots[due]  # its tick stays queued: skipped when the timer gets to it

    def _arm(self, due: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed = due
        self._handle = self.loop.call_at(due, self._fire)

    def _fire(self) -> None:
        self._handle, self._armed = None, math.inf
        now = self.loop.time()
        ticks, expired = self._ticks, list[Expiring]()
        while ticks and ticks[0] <= now:
            due = heapq.heappop(ticks)
            self._queued.discard(due)
            expired.extend(self._slots.pop(due, ()))
        while ticks and ticks[0] not in self._slots:  # emptied slots: no reason to wake for them
            self._queued.discard(heapq.heappop(ticks))
        if ticks:
            self._arm(ticks[0])
        for item in expired:
            item.expire()


def on_loop(owned: Wheel | None) -> Wheel:
    """The wheel an owner (an upstream, a Redis channel) keeps for its bounds: ``owned`` if it runs on
    the running loop, else a new one there. The owner holds it, so it dies with the owner's app."""
    loop = asyncio.get_running_loop()
    return owned if owned is not None and owned.loop is loop else Wheel(loop)


def current_task(loop: asyncio.AbstractEventLoop, what: str) -> tuple[asyncio.Task[object], int]:
    """The task a bound cancels, and its cancellation count when the bound began."""
    task = asyncio.current_task(loop)
    if task is None:
        raise RuntimeError(f"{what} must be used inside a task")
    return task, task.cancelling()


def timed_out(task: asyncio.Task[object], cancelling: int, expired: bool, exc_type: type[BaseException] | None) -> bool:
    """A cancellation leaving a bounded block is the bound's own when the bound fired and no one else
    cancelled the task too (``asyncio.timeout``'s rule)."""
    return expired and exc_type is asyncio.CancelledError and task.uncancel() <= cancelling


class Bound:
    """``with Bound(seconds):`` the block is cancelled when it runs past the bound and raises
    ``TimeoutError`` instead, like ``asyncio.timeout`` (a plain context manager: entering and leaving
    need no await); ``reschedule`` moves the bound."""

    __slots__ = ("_cancelling", "_due", "_expired", "_task", "_wheel", "_when", "seconds")

    def __init__(self, seconds: float, wheel: Wheel) -> None:
        self.seconds = seconds
        self._wheel = wheel
        self._expired = False

    def __enter__(self) -> Bound:
        loop = asyncio.get_running_loop()
        self._task, self._cancelling = current_task(loop, "Bound")
        w = self._wheel
        self._when = when = loop.time() + self.seconds
        self._due = w.add(self, when, self.seconds)
        return self

    def reschedule(self, seconds: float) -> None:
        """From now, ``seconds`` more (the next hop's bound). A bound moved later stays in its slot
        and is re-filed only if that slot comes due (``expire``): most calls end long before, and
        moving it on every call's second hop cost a set's discard and insert on cold memory."""
        self.seconds = seconds
        self._when = when = self._wheel.loop.time() + seconds
        if when < self._due:  # sooner than its slot: moved now
            self._wheel.discard(self, self._due)
            self._due = self._wheel.add(self, when, seconds)

    def expire(self) -> None:
        if self._wheel.loop.time() < self._when:  # moved later since it was filed
            self._due = self._wheel.add(self, self._when, self.seconds)
            return
        self._expired = True
        self._task.cancel()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._wheel.discard(self, self._due)
        if timed_out(self._task, self._cancelling, self._expired, exc_type):
            raise TimeoutError from exc

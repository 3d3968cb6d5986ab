"""A gateway's blocks of a shared queue's slots (docs/fair-queuing.md, "Cost when unsaturated").

While the pool is far from saturated, this gateway leases ``size`` slots at once in Redis and hands
them to requests with no call; a request that ends puts its slot back in the spare. The next block is
asked for in the background when the spare runs below half a block, and slots no request needed
between two keeper ticks go back. When Redis says the pool nears saturation (``tight``, or a lease
refused), the spare goes back at once and each block slot in use goes back to the queue as its
request ends: requests queue per request, in the fair order, until a lease is granted again.

Not here: the script (``gateway.limits.fairq_script``) and its calls (``gateway.limits.fairq_shared``),
the order (``gateway.limits.fairq``).
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from redis.exceptions import RedisError

MAX_BLOCK = 64  # ids per lease call: the script adds each one
RETRY_SECONDS = 0.5  # a refused or tight gateway asks for a block again at most this often
FAILURES = (RedisError, OSError, TimeoutError)

Later = Callable[[Coroutine[Any, Any, Any]], None]  # a call run off the request path


class Calls(Protocol):
    """The script's block calls (``gateway.limits.fairq_shared.Shared``)."""

    async def lease(self, rids: list[str], capacity: int, bound: int) -> int: ...

    async def give(self, rids: list[str], capacity: int, bound: int) -> int: ...


def block_size(capacity: int, replicas: int, reserve: int) -> int:
    """Slots leased at once: a quarter of a gateway's share (at most ``MAX_BLOCK``), so a pool holds
    a few blocks per gateway before it nears saturation; none with a reserve (its arrivals are
    counted by each request's call)."""
    return 0 if reserve else min(MAX_BLOCK, capacity // (4 * max(1, replicas)))


class Blocks:
    """This gateway's leased slots of one model: ``spare`` to hand out, ``mine`` spare or in use."""

    __slots__ = (
        "bound", "capacity", "failed", "generation", "lapsed", "later", "leasing", "low", "mine", "prefix",
        "retry_at", "serial", "shared", "size", "spare", "tight", "used",
    )  # fmt: skip

    def __init__(self, shared: Calls, later: Later, failed: Callable[[BaseException], None]) -> None:
        self.shared = shared
        self.later = later
        self.failed = failed  # the queue's: Redis out for ``redis.retry_seconds``
        self.size = self.capacity = self.bound = 0
        self.spare: list[str] = []
        self.mine: set[str] = set()
        self.lapsed: list[str] = []  # spare dropped while Redis failed: given back once it answers
        self.tight = False  # the pool nears saturation: per request until a lease is granted again
        self.retry_at = 0.0  # no lease asked before (monotonic)
        self.leasing = False
        self.generation = 0  # ``tight`` messages heard: a lease granted across one goes back
        self.low = 0  # the fewest spare slots since the last tick: that many were not needed
        self.used = 0  # requests since the last tick
        self.prefix = f"b{secrets.token_hex(4)}:"
        self.serial = itertools.count()

    def configure(self, size: int, capacity: int, bound: int) -> None:
        self.size, self.capacity, self.bound = size, capacity, bound
        if not size:
            self.give(len(self.spare))

    def take(self) -> str | None:
        """A spare slot's id, with no call; None when there is none or the pool nears saturation."""
        spare = self.spare
        self.used += 1
        if self.tight or not spare:
            if self.size:
                self.refill()
            return None
        rid = spare.pop()
        left = len(spare)
        self.low = min(self.low, left)
        if 2 * left < self.size:
            self.refill()
        return rid

    def put(self, rid: str) -> bool:
        """Whether the slot of a request that ended went back to the spare (a block slot, the pool not
        tight); if not, the caller gives it back to the queue."""
        if rid not in self.mine:
            return False
        if self.tight:
            self.mine.discard(rid)
            return False
        self.spare.append(rid)
        return True

    def refill(self) -> None:
        if self.leasing or (self.tight and time.monotonic() < self.retry_at):
            return
        self.leasing = True
        ids = [f"{self.prefix}{next(self.serial)}" for _ in range(self.size)]
        self.later(self.lease(ids, self.generation))

    async def lease(self, ids: list[str], generation: int) -> None:
        try:
            granted = await self.shared.lease(ids, self.capacity, self.bound)
        except FAILURES as exc:  # the script may have run: the ids go back (or run out)
            self.failed(exc)
            self.later(self.shared.give(ids, self.capacity, self.bound))
            return
        finally:
            self.leasing = False
        if not granted:
            self.saturated()
        elif generation != self.generation:  # told ``tight`` while the call was out
            self.later(self.shared.give(ids, self.capacity, self.bound))
        else:
            self.tight = False
            self.mine.update(ids)
            self.spare += ids
            self.low = min(self.low, len(self.spare)) if self.used else len(self.spare)

    def hold_off(self) -> None:
        self.tight = True
        self.retry_at = time.monotonic() + RETRY_SECONDS

    def saturated(self) -> None:
        """The pool nears saturation: the spare goes back at once, requests queue per request."""
        self.hold_off()
        self.give(len(self.spare))

    def tighten(self) -> None:
        """``tight`` heard (another gateway's call found the pool near saturation)."""
        self.generation += 1
        self.saturated()

    def drop(self, until: float) -> None:
        """Redis failed, or a lease was lost: nothing leased is handed out again (what Redis still
        holds runs out with its lease), and no block is asked for before ``until`` (monotonic)."""
        self.tight = True
        self.retry_at = until
        self.mine.clear()
        self.lapsed += self.spare
        self.spare = []

    def lost(self) -> None:
        """A renewal found fewer leases than it renewed (Redis restarted or flushed): the spare goes back
        (what Redis still holds of it) and is not handed out again."""
        self.hold_off()
        self.give(len(self.spare))
        self.mine.clear()

    def give(self, n: int) -> None:
        if n <= 0:
            return
        ids, self.spare = self.spare[:n], self.spare[n:]
        self.mine.difference_update(ids)
        self.low = min(self.low, len(self.spare))
        self.later(self.shared.give(ids, self.capacity, self.bound))

    def answered(self) -> None:
        """Redis answered again: what was spare when it failed goes back now, not when its lease runs out."""
        if self.lapsed:
            ids, self.lapsed = self.lapsed, []
            self.later(self.shared.give(ids, self.capacity, self.bound))

    async def close(self) -> None:
        """At shutdown: the spare goes back (best effort; else its lease runs out)."""
        ids, self.spare = self.spare + self.lapsed, []
        self.lapsed, self.tight = [], True
        if ids:
            with contextlib.suppress(*FAILURES):
                await self.shared.give(ids, self.capacity, self.bound)

    def trim(self) -> None:
        """At the keeper's tick: the spare slots no request needed since the last one go back, but a
        block's worth while requests came."""
        self.give(self.low - (self.size if self.used else 0))
        self.low, self.used = len(self.spare), 0

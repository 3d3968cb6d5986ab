"""Fair queuing in front of a saturated model (docs/fair-queuing.md).

A model with a ``queue`` has ``capacity`` slots: requests in flight to its targets. A request that
finds a slot free and nobody waiting takes it at once (no await, nothing else done); one that does
not waits in the model's queue. The queue is ordered by class first (strict: every waiting request
of a higher class goes before any of a lower one) and, within a class, by weighted fair queuing
across teams: start-time fair queuing, where a team's next request starts at max(the class's
virtual time, the team's last finish), finishes 1/weight later, the lowest start goes next (equal
starts: the earlier arrival). SFQ's virtual time is the start of the request in service; with
``capacity`` slots in service it is the lowest start of the last ``capacity`` served (at most
``WINDOW``). A newcomer from an idle team starts there, so a burst of up to its slots goes before
every backlogged team's next request: one slot's turnover, not a place behind them (with the start
last served, a second request of the burst ties with the backlog's head and waits two turnovers, and
a burst of k, 2k). A freed slot goes to the head of the queue, never to a newcomer while anyone waits.

Shedding: a wait past the request's deadline or the queue's ``timeout`` is refused (429 with a
``Retry-After`` from the queue's drain rate); a full queue evicts the last in line of the lowest
class below the newcomer's, else the last in line of its own class when that one's team is further
over its share than the newcomer's (its tag is later), else refuses the newcomer; while every target
of the model cools down, its 503. A waiter cancelled (its client gone) leaves at once, giving back a
slot granted meanwhile.

Reserve (opt-in, ``queue.reserve``): while a team without a backlog, or a higher class, sent a request
within ``reserve_window`` seconds, the last ``reserve`` free slots are kept from a team that has only
its own requests waiting, so the next arrival of the other finds a slot instead of waiting for a
release. It never idles a slot while a request of another team or class waits: with every team
backlogged the order (and the split by weight) is unchanged.

This module is the in-process queue: the whole of it without Redis, and each gateway's share while
Redis is out. ``gateway.limits.fairq_shared`` keeps the same order in Redis for every gateway.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.core.errors import GatewayError, RateLimited
from gateway.obs.metrics import FAIR_CAPACITY, FAIR_SHED, FAIR_SLOTS, FAIR_WAIT, FAIR_WAITING, LevelTally

PRIORITY_HEADER = "X-Gateway-Priority"
REASONS = ("full", "evicted", "timeout", "down")
MAX_RETRY_AFTER = 600.0
WINDOW = 64  # served starts kept per class for the virtual time (the script keeps as many)
QUEUE_HEADER = "X-Gateway-Queue"

Down = Callable[[], GatewayError | None]  # the model's 503 while every target cools down, else None


@dataclass(frozen=True, slots=True)
class QueueSettings:
    capacity: int
    max_waiting: int = 256
    timeout: float = 30.0
    share: int | None = None  # this gateway's slots while Redis is out (None: capacity / replicas)
    auto: bool = False  # ``capacity: auto``: ``capacity`` is learned (``fairq_policy.Learner``)
    reserve: int = 0  # free slots kept for another team's or a higher class's next arrival (0: off)
    reserve_window: float = 2.0  # seconds since a team's or class's last arrival that keep it active
    block: int = 0  # with Redis, slots a gateway leases at once while the pool is far from full (0: none)


@dataclass(frozen=True, slots=True)
class Ticket:
    """One request's place in the order: who (``team``, its metric ``label``), which class (``rank``:
    0 is the highest), the team's ``weight``, and until when it may wait (loop clock)."""

    rid: str
    team: str
    label: str
    cls: str
    rank: int
    weight: float = 1.0
    deadline: float | None = None


class Tags:
    """Start tags per class (start-time fair queuing): the arithmetic the Redis script repeats
    (``fairq_shared``). ``last``: each team's last finish; ``starts``: the starts last served, oldest
    first, as many as the slots (the virtual time is their lowest). A team's next start is never
    earlier than the virtual time less ``credit`` (twice the slots): a team that was below its share
    banks at most that much, so a burst of its requests goes before a backlogged team's next one for
    up to about three times the slots, and no further."""

    __slots__ = ("last", "starts")

    def __init__(self) -> None:
        self.starts: dict[int, list[float]] = {}
        self.last: dict[tuple[int, str], float] = {}

    def virtual(self, rank: int) -> float:
        return min(self.starts.get(rank) or (0.0,))

    def next(self, rank: int, team: str, credit: float) -> float:
        """The start tag ``team``'s next request of class ``rank`` would get."""
        return max(self.virtual(rank) - credit, self.last.get((rank, team), -math.inf))

    def tag(self, rank: int, team: str, weight: float, credit: float) -> float:
        start = self.next(rank, team, credit)
        self.last[rank, team] = start + 1.0 / weight
        return start

    def unwind(self, rank: int, team: str, start: float, weight: float) -> None:
        """An evicted request is not charged to its team: its last finish goes back to its start."""
        if self.last.get((rank, team)) == start + 1.0 / weight:
            self.last[rank, team] = start

    def served(self, rank: int, tag: float, slots: int) -> None:
        starts = self.starts.setdefault(rank, [])
        starts.append(tag)
        del starts[: max(0, len(starts) - window(slots))]


def window(slots: int) -> int:
    """Served starts kept for the virtual time."""
    return max(1, min(slots, WINDOW))


def credit(slots: int) -> float:
    """How far before the virtual time a team below its share may start: twice the window. With as
    much again as the slots the quiet team of the benchmark's scenario a waits as if it went strictly
    first (``python -m benchmarks.fair_sim``: p99 344-359 ms; 356-421 ms with the slots alone)."""
    return 2.0 * window(slots)


WAITING, GRANTED, EVICTED, LEFT = "waiting", "granted", "evicted", "left"


@dataclass(eq=False, slots=True)
class Waiter:
    ticket: Ticket
    seq: int
    tag: float
    fut: asyncio.Future[None]
    state: str = WAITING


class QueueFull(Exception):
    """The queue is at its bound and holds nobody of a lower class to make room."""


class Reserve:
    """Who was active lately (``reserve_window``) and who waits, per class and team: what the reserve
    asks before it keeps one of the last ``slots`` free slots from a team (the script repeats it)."""

    __slots__ = ("clock", "seen", "slots", "waiting", "window")

    def __init__(self, classes: int, slots: int = 0, window: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.slots = slots
        self.window = window
        self.clock = clock
        self.seen: list[dict[str, float]] = [{} for _ in range(classes)]  # team → its last arrival
        self.waiting: list[dict[str, int]] = [{} for _ in range(classes)]  # team → its requests waiting

    def arrived(self, rank: int, team: str) -> None:
        if self.slots:
            self.seen[rank][team] = self.clock()

    def queued(self, rank: int, team: str, n: int) -> None:
        counts = self.waiting[rank]
        counts[team] = counts.get(team, 0) + n

    def holds(self, rank: int, team: str, free: int, waiting: int, capacity: int) -> bool:
        """Whether ``team``'s request of class ``rank`` is kept from one of ``free`` slots: they are
        among the last ``slots`` (at most all but one: a held request always has a release to come),
        nobody else waits, and another team of its class or a team of a higher class arrived within
        the window."""
        if free > min(self.slots, capacity - 1) or waiting != self.waiting[rank].get(team, 0):
            return False
        since = self.clock() - self.window
        for r in range(rank + 1):
            for other, at in self.seen[r].items():
                if at > since and (r < rank or other != team):
                    return True
        return False


class LocalQueue:
    """One model's slots and waiters in this process."""

    def __init__(self, capacity: int, max_waiting: int, classes: int, reserve: Reserve | None = None) -> None:
        self.capacity = capacity
        self.max_waiting = max_waiting
        self.running = 0
        self.heaps: list[list[tuple[float, int, Waiter]]] = [[] for _ in range(classes)]
        self.counts = [0] * classes
        self.tags = Tags()
        self.seq = 0
        self.reserve = reserve if reserve is not None else Reserve(classes)

    @property
    def waiting(self) -> int:
        return sum(self.counts)

    def take(self, ticket: Ticket | None = None) -> bool:
        """A slot now, when one is free, nobody waits for it, and the reserve does not keep it."""
        if ticket is not None:
            self.reserve.arrived(ticket.rank, ticket.team)
        if self.running < self.capacity and not any(self.counts):
            if ticket is not None and self.kept(ticket.rank, ticket.team):
                return False
            self.running += 1
            return True
        return False

    def kept(self, rank: int, team: str) -> bool:
        """Whether the reserve keeps the free slots from ``team``'s request of class ``rank``."""
        free = self.capacity - self.running
        return bool(self.reserve.slots) and self.reserve.holds(rank, team, free, self.waiting, self.capacity)

    def join(self, ticket: Ticket) -> Waiter:
        """Queued in order; past the bound ``victim`` goes (told ``EVICTED``), or ``QueueFull``."""
        self.reserve.arrived(ticket.rank, ticket.team)
        if self.waiting >= self.max_waiting:
            victim = self.victim(ticket)
            if victim is None:
                raise QueueFull
            self._drop(victim, EVICTED)
            t = victim.ticket
            self.tags.unwind(t.rank, t.team, victim.tag, t.weight)
            victim.fut.set_result(None)
        self.seq += 1
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = Waiter(
            ticket, self.seq, self.tags.tag(ticket.rank, ticket.team, ticket.weight, credit(self.capacity)), fut
        )
        heap = self.heaps[ticket.rank]
        heapq.heappush(heap, (waiter.tag, waiter.seq, waiter))
        self.counts[ticket.rank] += 1
        self.reserve.queued(ticket.rank, ticket.team, 1)
        if len(heap) > 2 * self.counts[ticket.rank] + 64:  # entries of those who left, compacted
            self.heaps[ticket.rank] = [e for e in heap if e[2].state == WAITING]
            heapq.heapify(self.heaps[ticket.rank])
        self.promote()
        return waiter

    def leave(self, waiter: Waiter) -> bool:
        """Out of the queue; whether it holds a slot (granted before it left: the caller gives it back)."""
        if waiter.state == WAITING:
            self._drop(waiter, LEFT)
        return waiter.state == GRANTED

    def release(self) -> None:
        self.running -= 1
        self.promote()

    def promote(self) -> None:
        """Free slots to the head of the queue, unless the reserve keeps them from it."""
        while self.running < self.capacity:
            waiter = self.pop()
            if waiter is None:
                return
            self.running += 1
            waiter.state = GRANTED
            waiter.fut.set_result(None)

    def pop(self) -> Waiter | None:
        """The head of the queue, out of it; None when nobody waits or the reserve keeps the slot."""
        for rank, heap in enumerate(self.heaps):
            while heap:
                tag, _, waiter = heap[0]
                if waiter.state != WAITING:
                    heapq.heappop(heap)
                    continue
                if waiter.fut.done():  # cancelled: its task leaves when it runs next
                    heapq.heappop(heap)
                    self._drop(waiter, LEFT)
                    continue
                if self.kept(rank, waiter.ticket.team):
                    return None
                heapq.heappop(heap)
                self.counts[rank] -= 1
                self.reserve.queued(rank, waiter.ticket.team, -1)
                self.tags.served(rank, tag, self.capacity)
                return waiter
        return None

    def victim(self, ticket: Ticket) -> Waiter | None:
        """Who makes room in a full queue: the last in line of the lowest class below the newcomer's;
        else the last in line of its own class, when that one's tag is behind the newcomer's (its team
        is over its share: a quiet team's request is never refused to keep a noisy team's)."""
        for lower in range(len(self.heaps) - 1, ticket.rank, -1):
            last = self.last_in_line(lower)
            if last is not None:
                return last
        last = self.last_in_line(ticket.rank)
        if last is not None and last.tag > self.tags.next(ticket.rank, ticket.team, credit(self.capacity)):
            return last
        return None

    def last_in_line(self, rank: int) -> Waiter | None:
        live = [(tag, seq, w) for tag, seq, w in self.heaps[rank] if w.state == WAITING]
        return max(live, key=lambda e: (e[0], e[1]))[2] if live else None

    def ahead(self, rank: int) -> int:
        """Waiting requests that go before a newcomer of class ``rank``."""
        return sum(self.counts[: rank + 1])

    def _drop(self, waiter: Waiter, state: str) -> None:
        waiter.state = state
        self.counts[waiter.ticket.rank] -= 1
        self.reserve.queued(waiter.ticket.rank, waiter.ticket.team, -1)


class Drain:
    """How fast the queue drains: capacity / the mean time a slot is held, measured here."""

    __slots__ = ("mean",)

    def __init__(self) -> None:
        self.mean = 1.0  # seconds, until measured

    def held(self, seconds: float) -> None:
        self.mean += 0.1 * (seconds - self.mean)

    def retry_after(self, ahead: int, capacity: int) -> float:
        """Seconds until the queue has served ``ahead`` requests and one more, at the measured rate."""
        return float(min(MAX_RETRY_AFTER, max(1, math.ceil((ahead + 1) * self.mean / max(capacity, 1)))))


@dataclass(slots=True)
class Gauges:
    """One model's metric children, made as labels first appear (bounded: config names)."""

    model: str
    slots: LevelTally
    waiting: dict[tuple[str, str], LevelTally] = field(default_factory=dict)
    shed: dict[tuple[str, str, str], int] = field(default_factory=dict)  # for /status

    def waiters(self, ticket: Ticket) -> LevelTally:
        key = (ticket.cls, ticket.label)
        tally = self.waiting.get(key)
        if tally is None:
            tally = self.waiting[key] = LevelTally(FAIR_WAITING.labels(self.model, *key))
        return tally

    def shed_one(self, ticket: Ticket, reason: str) -> None:
        FAIR_SHED.labels(self.model, ticket.cls, ticket.label, reason).inc()
        key = (ticket.cls, ticket.label, reason)
        self.shed[key] = self.shed.get(key, 0) + 1


class Slot:
    """A slot held by one request: ``release`` gives it back once (the answer ended). ``rid``: the
    request's id where the slot is a lease in Redis (``fairq_shared``), "" for this process's."""

    __slots__ = ("began", "queue", "rank", "rid")

    def __init__(self, queue: ModelQueue, rid: str = "", rank: int = 0) -> None:
        self.queue: ModelQueue | None = queue
        self.began = time.monotonic()
        self.rid = rid
        self.rank = rank

    def release(self) -> None:
        queue, self.queue = self.queue, None
        if queue is not None:
            queue.drain.held(time.monotonic() - self.began)
            queue.gauges.slots.n -= 1
            queue.give_back(self)


class ModelQueue:
    """One model's queue as the pipeline sees it: ``enter`` for a slot, ``Slot.release`` after."""

    def __init__(self, model: str, settings: QueueSettings, classes: int) -> None:
        self.model = model
        self.settings = settings
        self.classes = classes
        reserve = Reserve(classes, settings.reserve, settings.reserve_window)
        self.local = LocalQueue(self.local_capacity(settings), settings.max_waiting, classes, reserve)
        self.drain = Drain()
        self.gauges = Gauges(model, LevelTally(FAIR_SLOTS.labels(model)))
        FAIR_CAPACITY.labels(model).set(self.local.capacity)

    def local_capacity(self, settings: QueueSettings) -> int:
        """The slots this process's queue hands out: all of them (no Redis)."""
        return settings.capacity

    def reconfigure(self, settings: QueueSettings) -> None:
        self.settings = settings
        self.local.capacity, self.local.max_waiting = self.local_capacity(settings), settings.max_waiting
        self.local.reserve.slots, self.local.reserve.window = settings.reserve, settings.reserve_window
        FAIR_CAPACITY.labels(self.model).set(self.local.capacity)
        self.local.promote()

    def at_once(self, rank: int) -> Slot | None:
        """A slot free now, taken with no ticket and no await (no reserve: it asks who the request
        is); else None, and the request ``enter``s."""
        if self.settings.reserve or not self.local.take():
            return None
        self.gauges.slots.n += 1
        return Slot(self)

    async def enter(self, ticket: Ticket, down: Down) -> Slot:
        """A slot for ``ticket``: at once when one is free, else after waiting its turn; or the refusal."""
        if self.local.take(ticket):
            self.gauges.slots.n += 1
            return Slot(self)
        return await self.wait(ticket, down)

    def give_back(self, slot: Slot) -> None:
        self.local.release()

    async def wait(self, ticket: Ticket, down: Down) -> Slot:
        gauges = self.gauges
        if (err := down()) is not None:
            gauges.shed_one(ticket, "down")
            raise err
        try:
            waiter = self.local.join(ticket)
        except QueueFull:
            raise self.refused(ticket, "full") from None
        waiters = gauges.waiters(ticket)
        waiters.n += 1
        loop = asyncio.get_running_loop()
        began = loop.time()
        until = began + self.settings.timeout
        if ticket.deadline is not None:
            until = min(until, ticket.deadline)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.fut), max(0.0, until - loop.time()))
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            if self.local.leave(waiter):  # granted as the client went: the slot goes to the next
                self.local.release()
            raise
        finally:
            waiters.n -= 1
        if self.local.leave(waiter):
            FAIR_WAIT.labels(self.model, ticket.cls, ticket.label).observe(loop.time() - began)
            gauges.slots.n += 1
            return Slot(self)
        if waiter.state == EVICTED:
            raise self.refused(ticket, "evicted")
        if (err := down()) is not None:
            gauges.shed_one(ticket, "down")
            raise err
        raise self.refused(ticket, "timeout")

    def refused(self, ticket: Ticket, reason: str, ahead: int | None = None) -> RateLimited:
        self.gauges.shed_one(ticket, reason)
        why = {
            "full": "its queue is full",
            "evicted": "a request of a higher class took the waiting request's place",
            "timeout": "the request waited its longest for a slot",
        }[reason]
        if ahead is None:
            ahead, capacity = self.local.ahead(ticket.rank), self.local.capacity
        else:
            capacity = self.settings.capacity
        retry = self.drain.retry_after(ahead, capacity)
        err = RateLimited(f"model {self.model!r} is at capacity and {why}: retry later", retry_after=retry)
        err.headers[QUEUE_HEADER] = f"shed-{reason}"
        return err

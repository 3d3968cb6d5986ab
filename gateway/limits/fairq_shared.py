"""A model's slots and queue shared by every gateway through Redis (docs/fair-queuing.md), so two
gateways in front of one pool are fair together, not each on its own half.

One Lua script (``gateway.limits.fairq_script``: its keys and answers) does everything atomically,
on Redis's clock.

Every call first drops run-out leases (a gateway killed with its slots: they come back within
``limits.lease_ttl``) and run-out waiters (``WAITER_LEASE`` after their gateway last checked), then
gives free slots to the heads of the queue, highest class first, and publishes the ids it promoted on
``gw:fq:{model}:free``. So the call that releases a slot hands it to the head of the fair order in the
same step, and the waiter's gateway learns of it from that message (no further call): a grant is one
round trip after the release. A waiter checks by itself every ``POLL_SECONDS`` when no message names
it (a lease that ran out publishes nothing), which renews its place. A free slot with nobody waiting
costs one round trip: the ``enter`` call that takes it, unless this gateway holds a block.

Blocks: while the pool is far from saturated, a gateway leases ``block`` slots at once (``lease``:
granted only while nobody waits and as many again stay free), hands them to requests with no call,
and takes them back when the requests end; it asks for the next block in the background before its
spare runs out, and gives spare slots back when they go unused (``give``). Block slots are ordinary
leases in ``run`` (renewed with the others, so a killed gateway's come back within the lease), also
listed in ``blk``. When a call finds the pool near saturation (free slots fewer than a block, or a
request queued) while blocks are out, it publishes ``tight``: every gateway gives its spare slots
back at once, returns each block slot as its request ends (a ``leave``, which hands it to the head of
the queue) and queues per request, trying a lease again at most every ``fairq_blocks.RETRY_SECONDS``.
So the fair order and the reserve (no blocks with a reserve) hold when saturated; a
request can wait while another gateway's spare slots are on their way back (one message and one call).
Every renewal says ``tight`` again while anyone waits, for a gateway whose listener missed it.

While Redis is out (``redis.retry_seconds`` breaker), each gateway queues on its own share
(``queue.share``, or capacity / ``limits.replicas``) as limits do, or refuses with 503 under
``redis.on_failure.concurrency: closed``. The requests still running on slots this gateway took from
Redis count against that share until they end.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from redis.exceptions import NoScriptError, RedisError

from gateway.core.errors import StoreUnavailable
from gateway.limits.channel import ScriptChannel
from gateway.limits.fairq import Down, ModelQueue, QueueSettings, Slot, Ticket
from gateway.limits.fairq_blocks import Blocks
from gateway.limits.fairq_script import FULL, GONE, GRANTED, PATTERN, SCRIPT, SHA, channel, keys
from gateway.obs.metrics import FAIR_WAIT
from gateway.runtime.internals import bulk, evalsha_head
from gateway.runtime.throttle import LogThrottle

log = logging.getLogger("gateway.limits")
throttled = LogThrottle(log)
POLL_SECONDS = 0.5  # a waiter checks by itself this often when no message names it
WAITER_LEASE = 10 * POLL_SECONDS  # a waiter not checked for this long (its gateway gone) leaves the queue
FAILURES = (RedisError, OSError, TimeoutError)


class Shared:
    """One model's calls of the script, and the waiters this gateway has parked on its channel."""

    def __init__(
        self, client: Any, model: str, classes: int, lease_ms: int, calls: ScriptChannel | None = None
    ) -> None:
        self.client = client
        self.model = model
        self.keys = keys(model, classes)
        self.channel = channel(model)
        self.lease_ms = lease_ms
        self.script = client.register_script(SCRIPT)
        # the calls packed once as RESP and sent on the limits' kind of connection (``ScriptChannel``):
        # about a third of the client's cost of a redis-py script call; None (a cluster): redis-py's
        self.calls = calls
        self.head = (SHA, [k.encode() for k in self.keys])
        self.reserve = (0, 0)  # ``queue.reserve`` and its window (ms), as the script takes them
        self.block = 0  # the slots a gateway leases at once (0: none, per request only)
        self.tightened: Callable[[], None] = _nothing  # told ``tight``: the pool nears saturation
        self.parked: dict[str, asyncio.Event] = {}  # request id → set when a message names it
        self.told: dict[str, int] = {}  # parked ids a message named: GRANTED or GONE (evicted)

    async def call(self, op: str, capacity: int, bound: int, *args: str | int | float) -> list[int]:
        argv: list[str | int | float] = [op, capacity, bound, self.lease_ms, self.channel, int(WAITER_LEASE * 1000)]
        argv += [*self.reserve, self.block, *args]
        if self.calls is None:
            return [int(x) for x in await self.script(keys=self.keys, args=argv)]
        words = [str(a).encode() for a in argv]
        packed = evalsha_head(*self.head, len(words)) + b"".join([bulk(w) for w in words[:-1]])
        result = await self.calls.evalsha(packed, words[-1])
        if isinstance(result, NoScriptError):  # Redis restarted or flushed: redis-py's call loads it
            result = await self.script(keys=self.keys, args=argv)
        elif isinstance(result, Exception):
            raise result
        return [int(x) for x in result]

    async def enter(self, ticket: Ticket, capacity: int, bound: int, op: str = "enter") -> list[int]:
        return await self.call(op, capacity, bound, ticket.rid, ticket.rank, ticket.team, repr(ticket.weight))

    async def leave(self, rid: str, rank: int, capacity: int, bound: int) -> int:
        return (await self.call("leave", capacity, bound, rid, rank))[0]

    async def renew(self, rids: list[str], capacity: int, bound: int) -> int:
        return (await self.call("renew", capacity, bound, *rids))[0]

    async def lease(self, rids: list[str], capacity: int, bound: int) -> int:
        return (await self.call("lease", capacity, bound, *rids))[0]

    async def give(self, rids: list[str], capacity: int, bound: int) -> int:
        return (await self.call("give", capacity, bound, *rids))[0]

    def heard(self, data: str) -> None:
        """A message on the channel: the ids it names (promoted, or ``evicted:`` ones) wake their waiters."""
        for word in data.split():
            if word == "tight":
                self.tightened()
                continue
            rid = word.removeprefix("evicted:")
            event = self.parked.get(rid)
            if event is not None:
                self.told[rid] = GONE if rid != word else GRANTED
                event.set()

    def expect(self, rid: str) -> None:
        """From now until ``forget``, a message naming ``rid`` is kept for its ``park``."""
        self.parked[rid] = asyncio.Event()

    def forget(self, rid: str) -> None:
        self.parked.pop(rid, None)
        self.told.pop(rid, None)

    async def park(self, rid: str, seconds: float) -> int | None:
        """Until a message names ``rid`` (what it said; at once if one came since the last park), or
        ``seconds`` pass (None). ``rid`` is expected (``expect``)."""
        event = self.parked.setdefault(rid, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)
        event.clear()
        return self.told.pop(rid, None)


class Listener:
    """One subscription per process to every model's channel: a message wakes the waiters it names."""

    def __init__(self, client: Any, models: Callable[[], Mapping[str, ModelQueue]]) -> None:
        self.client = client
        self.models = models
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self.listen(), name="fair-queue-listener")

    def heard(self, message: dict[str, Any]) -> None:
        model = _text(message["channel"]).removeprefix("gw:fq:{").removesuffix("}:free")
        queue = self.models().get(model)
        if isinstance(queue, SharedQueue):
            queue.shared.heard(_text(message["data"]))

    async def listen(self) -> None:
        while True:
            try:
                pubsub = self.client.pubsub()
                await pubsub.psubscribe(PATTERN)
                try:
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=POLL_SECONDS)
                        if message is not None and message.get("type") == "pmessage":
                            self.heard(message)
                finally:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis out: waiters poll meanwhile; subscribe again later
                throttled.warning("fairq:listen", "fair queue channel lost (%s); waiters poll", type(exc).__name__)
                await asyncio.sleep(POLL_SECONDS)

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class SharedQueue(ModelQueue):
    """A model's queue in Redis, with this process's queue for its share while Redis is out."""

    def __init__(
        self, model: str, settings: QueueSettings, classes: int, shared: Shared, closed: bool, retry_seconds: float
    ) -> None:
        super().__init__(model, settings, classes)
        self.shared = shared
        shared.reserve = reserved(settings)
        self.closed = closed  # ``redis.on_failure.concurrency: closed``: 503 while Redis is out
        self.retry_seconds = retry_seconds
        self.down_until = 0.0
        self.held: dict[str, int] = {}  # this gateway's leases: request id → class, renewed while held
        self.counted: set[str] = set()  # held leases counted in this gateway's share since Redis failed
        self.tasks: set[asyncio.Task[None]] = set()
        self.blocks = Blocks(shared, self.later, self.failed)
        shared.tightened = self.blocks.tighten
        self.configure_blocks(settings)

    def local_capacity(self, settings: QueueSettings) -> int:
        return settings.share or settings.capacity

    def reconfigure(self, settings: QueueSettings) -> None:
        self.shared.reserve = reserved(settings)
        self.configure_blocks(settings)
        super().reconfigure(settings)

    def configure_blocks(self, settings: QueueSettings) -> None:
        size = 0 if settings.reserve else settings.block  # a reserve counts every arrival in Redis
        self.shared.block = size
        self.blocks.configure(size, settings.capacity, settings.max_waiting)

    def at_once(self, rank: int) -> Slot | None:
        rid = self.blocks.take()
        if rid is None:
            return None
        self.held[rid] = rank  # renewed while held, counted in the share if Redis fails meanwhile
        self.gauges.slots.n += 1
        return Slot(self, rid, rank)

    async def enter(self, ticket: Ticket, down: Down) -> Slot:
        if (slot := self.at_once(ticket.rank)) is not None:  # a slot of this gateway's block: no call
            return slot
        if time.monotonic() < self.down_until:
            return await self.outage(ticket, down)
        # the wait, here or in this gateway's share after a failure, ends at arrival + timeout
        ticket = self.until(ticket, asyncio.get_running_loop().time() + self.settings.timeout)
        self.shared.expect(ticket.rid)  # before the call: a grant published meanwhile is not missed
        try:
            return await self.enter_shared(ticket, down)
        finally:
            self.shared.forget(ticket.rid)

    async def enter_shared(self, ticket: Ticket, down: Down) -> Slot:
        s = self.settings
        try:
            answer = await self.shared.enter(ticket, s.capacity, s.max_waiting)
        except FAILURES as exc:  # the script may have run (a slot or a place taken): given back
            self.failed(exc)
            self.later(self.shared.leave(ticket.rid, ticket.rank, s.capacity, s.max_waiting))
            return await self.outage(ticket, down)
        except asyncio.CancelledError:  # its client went mid-call: whatever the call took goes back
            self.later(self.shared.leave(ticket.rid, ticket.rank, s.capacity, s.max_waiting))
            raise
        if answer[0] == GRANTED:
            return self.granted(ticket)
        if answer[0] == FULL:
            raise self.refused(ticket, "full", s.max_waiting)
        return await self.wait_shared(ticket, down, answer[1])

    @staticmethod
    def until(ticket: Ticket, until: float) -> Ticket:
        """``ticket`` with its deadline no later than ``until`` (loop clock)."""
        if ticket.deadline is not None and ticket.deadline <= until:
            return ticket
        return dataclasses.replace(ticket, deadline=until)

    async def outage(self, ticket: Ticket, down: Down) -> Slot:
        if self.closed:
            raise unavailable(self.model)
        return await super().enter(ticket, down)

    def failed(self, exc: BaseException) -> None:
        self.down_until = time.monotonic() + self.retry_seconds
        self.blocks.drop(self.down_until)
        # the requests still running on Redis's slots fill this gateway's share until they end
        for rid in self.held.keys() - self.counted:
            self.counted.add(rid)
            self.local.running += 1
        throttled.warning(
            f"fairq:{self.model}", "model %s's shared queue: Redis failed (%s); this gateway's share serves",
            self.model, type(exc).__name__,
        )  # fmt: skip

    def granted(self, ticket: Ticket) -> Slot:
        self.held[ticket.rid] = ticket.rank
        self.gauges.slots.n += 1
        return Slot(self, ticket.rid, ticket.rank)

    async def wait_shared(self, ticket: Ticket, down: Down, ahead: int) -> Slot:
        if (err := down()) is not None:
            self.later(self.shared.leave(ticket.rid, ticket.rank, self.settings.capacity, self.settings.max_waiting))
            self.gauges.shed_one(ticket, "down")
            raise err
        loop = asyncio.get_running_loop()
        began = loop.time()
        until = ticket.deadline if ticket.deadline is not None else began + self.settings.timeout
        waiters = self.gauges.waiters(ticket)
        waiters.n += 1
        s = self.settings
        try:
            while (left := until - loop.time()) > 0:
                told = await self.shared.park(ticket.rid, min(POLL_SECONDS, left))
                answer = (
                    [told] if told is not None else await self.shared.enter(ticket, s.capacity, s.max_waiting, "check")
                )
                if answer[0] == GRANTED:
                    FAIR_WAIT.labels(self.model, ticket.cls, ticket.label).observe(loop.time() - began)
                    return self.granted(ticket)
                if answer[0] == GONE:
                    raise self.refused(ticket, "evicted", ahead)
                ahead = answer[1]
            # out of the queue; a slot granted in this last instant goes back with it, to the next
            await self.shared.leave(ticket.rid, ticket.rank, s.capacity, s.max_waiting)
        except asyncio.CancelledError:  # its client went: out of the queue now (a slot granted goes back)
            self.later(self.shared.leave(ticket.rid, ticket.rank, s.capacity, s.max_waiting))
            raise
        except FAILURES as exc:
            self.failed(exc)
            self.later(self.shared.leave(ticket.rid, ticket.rank, s.capacity, s.max_waiting))
            return await self.outage(ticket, down)
        finally:
            waiters.n -= 1
        if (err := down()) is not None:
            self.gauges.shed_one(ticket, "down")
            raise err
        raise self.refused(ticket, "timeout", ahead)

    def give_back(self, slot: Slot) -> None:
        if not slot.rid:
            self.local.release()
            return
        self.held.pop(slot.rid, None)
        if slot.rid in self.counted:
            self.counted.discard(slot.rid)
            self.local.release()
        elif self.blocks.put(slot.rid):
            return
        self.later(self.shared.leave(slot.rid, slot.rank, self.settings.capacity, self.settings.max_waiting))

    def later(self, call: Any) -> None:
        """A release or a leave, off the request path; if it fails, the lease runs out by itself."""
        task = asyncio.create_task(self._quietly(call))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _quietly(self, call: Any) -> None:
        try:
            await call
        except FAILURES as exc:
            throttled.warning(f"fairq:leave:{self.model}", "a slot's release failed (%s): its lease runs out", exc)

    async def renew(self) -> None:
        """The leases this gateway holds, renewed (a block's spare among them); spare slots no request
        needed since the last renewal go back."""
        rids, s = [*self.held, *self.blocks.spare], self.settings
        if (rids or self.blocks.lapsed) and time.monotonic() >= self.down_until:
            try:
                renewed = await self.shared.renew(rids, s.capacity, s.max_waiting) if rids else 0
            except FAILURES as exc:
                self.failed(exc)
                return
            if renewed < len(rids):  # a lease lost (Redis restarted, flushed): no spare is handed out
                self.blocks.lost()
            self.blocks.answered()
        self.blocks.trim()


def reserved(settings: QueueSettings) -> tuple[int, int]:
    """``queue.reserve`` and its window in ms, as the script takes them."""
    return settings.reserve, int(settings.reserve_window * 1000)


def _nothing() -> None:
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def unavailable(model: str) -> StoreUnavailable:
    return StoreUnavailable(f"model {model!r}'s shared queue is unavailable (Redis is out): retry later")

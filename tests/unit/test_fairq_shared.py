"""The shared queue's request side (``gateway.limits.fairq_shared.SharedQueue``) against a scripted
Redis, on the virtual clock: a failed call leaves nothing behind in Redis, a wait that falls back to
this gateway's share keeps its first deadline, and a grant published before the waiter parks is seen
at once (no poll)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from gateway.core.errors import RateLimited
from gateway.limits.fairq import QueueSettings, Ticket
from gateway.limits.fairq_shared import Shared, SharedQueue
from tests.support.clock import VirtualClock
from tests.support.waiting import eventually

Answer = Callable[[str], Awaitable[list[int]]]  # the answer to one op, given the request id


class Client:
    def register_script(self, script: str) -> None:
        return None


class Scripted(Shared):
    """The script's answers per op, as a test writes them; every call recorded as (op, request id)."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        super().__init__(Client(), "m", 2, 30_000)
        self.answers = answers
        self.calls: list[tuple[str, str]] = []

    async def call(self, op: str, capacity: int, bound: int, *args: str | int | float) -> list[int]:
        self.calls.append((op, str(args[0])))
        return await self.answers[op](str(args[0]))


def queue(shared: Shared, timeout: float = 10.0) -> SharedQueue:
    settings = QueueSettings(capacity=2, max_waiting=8, timeout=timeout, share=1)
    return SharedQueue("m", settings, 2, shared, closed=False, retry_seconds=60.0)


def ticket(rid: str) -> Ticket:
    return Ticket(rid, "a", "a", "interactive", 0)


def answer(value: list[int]) -> Answer:
    async def reply(rid: str) -> list[int]:
        return value

    return reply


def fails_after_running(ran: list[str]) -> Answer:
    async def reply(rid: str) -> list[int]:
        ran.append(rid)  # Redis ran it (a slot or a place taken) ...
        raise TimeoutError  # ... and the answer came past redis.timeout_ms

    return reply


async def test_an_enter_call_that_fails_after_redis_ran_it_is_left_at_once() -> None:
    ran: list[str] = []
    shared = Scripted({"enter": fails_after_running(ran), "leave": answer([1])})
    q = queue(shared)
    slot = await q.enter(ticket("r1"), lambda: None)  # this gateway's share serves it
    assert ran == ["r1"] and slot.rid == ""
    await eventually(lambda: ("leave", "r1") in shared.calls, "what the failed call took given back")
    slot.release()


async def test_a_wait_that_falls_back_to_the_share_keeps_its_first_deadline(clock: VirtualClock) -> None:
    checks = 0

    async def check(rid: str) -> list[int]:
        nonlocal checks
        checks += 1
        if clock.now < 6.0:
            return [0, 1]
        raise TimeoutError  # Redis fails 6 s into the wait

    shared = Scripted({"enter": answer([0, 1]), "check": check, "leave": answer([0])})
    q = queue(shared, timeout=10.0)
    assert q.local.take()  # the share (1 slot) is held: the fallen-back request waits locally
    began = clock.now
    with pytest.raises(RateLimited) as shed:
        await q.enter(ticket("r1"), lambda: None)
    assert checks > 1
    assert shed.value.headers["X-Gateway-Queue"] == "shed-timeout"
    assert clock.now - began == pytest.approx(10.0, abs=0.01)  # arrival + timeout, not 6 s + timeout
    q.local.release()


async def test_a_grant_published_before_the_waiter_parks_is_seen_without_a_poll(clock: VirtualClock) -> None:
    shared: Scripted

    async def enter(rid: str) -> list[int]:
        shared.heard(rid)  # the other gateway's call promoted it; the message beat this answer
        return [0, 1]

    shared = Scripted({"enter": enter, "check": answer([1]), "leave": answer([1])})
    q = queue(shared)
    began = clock.now
    slot = await q.enter(ticket("r1"), lambda: None)
    assert slot.rid == "r1"
    assert shared.calls == [("enter", "r1")]  # granted by the message: no check after a 0.5 s poll
    assert clock.now - began < 0.01
    assert not shared.parked and not shared.told
    slot.release()


async def test_slots_taken_from_redis_fill_the_share_while_redis_is_out() -> None:
    """Redis fails while a request runs on a slot this gateway took from it: that request counts
    against the share (one slot) until it ends, so the next one waits for it."""
    shared = Scripted({"enter": answer([1]), "leave": answer([1])})
    q = queue(shared)
    held = await q.enter(ticket("r1"), lambda: None)
    assert held.rid == "r1"
    shared.answers["enter"] = fails_after_running([])
    waiting = asyncio.create_task(q.enter(ticket("r2"), lambda: None))
    await eventually(lambda: q.local.waiting == 1, "the next request waiting for the share")
    held.release()
    slot = await waiting
    assert slot.rid == "" and q.local.running == 1
    slot.release()
    assert q.local.running == 0


# --- blocks: slots leased at once, handed out with no call -----------------------------------------


def blocked(shared: Shared, capacity: int = 8, block: int = 2) -> SharedQueue:
    settings = QueueSettings(capacity=capacity, max_waiting=8, timeout=10.0, share=1, block=block)
    return SharedQueue("m", settings, 2, shared, closed=False, retry_seconds=60.0)


def ops(shared: Scripted) -> list[str]:
    return [op for op, _ in shared.calls]


async def test_slots_of_a_leased_block_are_handed_out_and_taken_back_with_no_call() -> None:
    shared = Scripted({"enter": answer([1]), "lease": answer([2]), "leave": answer([1])})
    q = blocked(shared)
    first = await q.enter(ticket("r0"), lambda: None)  # no block yet: the request's own call
    await eventually(lambda: len(q.blocks.spare) == 2, "a block of two leased in the background")
    first.release()
    await eventually(lambda: "leave" in ops(shared), "the request's own slot left")
    for i in range(20):  # one at a time, then two at once: the block serves them all
        slots = [await q.enter(ticket(f"r{i}.{j}"), lambda: None) for j in range(2)]
        assert all(s.rid.startswith(q.blocks.prefix) for s in slots)
        for s in slots:
            s.release()
    assert sorted(ops(shared)) == ["enter", "lease", "leave"]  # 40 requests, not one call
    assert len(q.blocks.spare) == 2 and not q.held


async def test_tight_gives_the_spare_back_and_each_block_slot_as_its_request_ends() -> None:
    """Another gateway's call found the pool near saturation: this one's spare goes back at once, a
    block slot in use goes back to the queue (a ``leave``: to the head of the line) when its request
    ends, and the next request queues per request."""
    given: list[str] = []

    async def give(rid: str) -> list[int]:
        given.append(rid)
        return [1]

    shared = Scripted({"enter": answer([1]), "lease": answer([2]), "leave": answer([1]), "give": give})
    q = blocked(shared)
    (await q.enter(ticket("r0"), lambda: None)).release()
    await eventually(lambda: len(q.blocks.spare) == 2, "a block leased")
    in_use = await q.enter(ticket("r1"), lambda: None)
    spare = q.blocks.spare[0]
    shared.heard("tight")
    await eventually(lambda: given == [spare], "the spare slot given back")
    in_use.release()
    await eventually(lambda: ("leave", in_use.rid) in shared.calls, "the block slot in use left to the queue")
    assert not q.blocks.spare and not q.blocks.mine
    slot = await q.enter(ticket("r2"), lambda: None)
    assert slot.rid == "r2" and shared.calls[-1] == ("enter", "r2")  # per request, no lease within the retry
    slot.release()


async def test_a_lease_granted_across_a_tight_message_goes_back_unused() -> None:
    """The lease's answer and ``tight`` travel on different connections: a block granted while a
    ``tight`` came is given back, never handed out."""
    shared: Scripted
    given: list[str] = []

    async def lease(rid: str) -> list[int]:
        shared.heard("tight")  # the message overtook the answer
        return [2]

    async def give(rid: str) -> list[int]:
        given.append(rid)
        return [2]

    shared = Scripted({"enter": answer([1]), "lease": lease, "leave": answer([1]), "give": give})
    q = blocked(shared)
    (await q.enter(ticket("r0"), lambda: None)).release()
    await eventually(lambda: given, "the block given back")
    assert given[0].startswith(q.blocks.prefix)
    assert not q.blocks.spare and q.blocks.tight


async def test_a_lost_lease_drops_the_spare_and_a_failure_keeps_it_unused() -> None:
    """A renewal that finds fewer leases than it renews (Redis flushed or restarted) gives the spare
    back and hands none of it out again; nor does a gateway whose call failed, which gives it back at
    its first renewal once Redis answers again (not a lease later)."""
    shared = Scripted(
        {"enter": answer([1]), "lease": answer([2]), "leave": answer([1]), "renew": answer([1]), "give": answer([1])}
    )
    q = blocked(shared)
    (await q.enter(ticket("r0"), lambda: None)).release()
    await eventually(lambda: len(q.blocks.spare) == 2, "a block leased")
    await q.renew()  # two leases renewed as one: one was lost
    assert not q.blocks.spare and q.blocks.tight
    await eventually(lambda: "give" in ops(shared), "what Redis still holds of the spare given back")
    q.blocks.tight, q.blocks.spare, q.blocks.mine = False, ["b:x"], {"b:x"}
    q.failed(TimeoutError())
    assert q.blocks.take() is None and not q.blocks.mine
    q.down_until = 0.0  # Redis's breaker passed
    await q.renew()
    await eventually(lambda: ("give", "b:x") in shared.calls, "the spare dropped at the failure given back")


async def test_spare_slots_no_request_needed_go_back_at_the_keepers_tick() -> None:
    given: list[str] = []

    async def give(rid: str) -> list[int]:
        given.append(rid)
        return [1]

    shared = Scripted(
        {"enter": answer([1]), "lease": answer([2]), "leave": answer([1]), "renew": answer([2]), "give": give}
    )
    q = blocked(shared)
    (await q.enter(ticket("r0"), lambda: None)).release()
    await eventually(lambda: len(q.blocks.spare) == 2, "a block leased")
    await q.renew()  # requests came since the lease (the first): a block's worth is kept
    assert given == [] and len(q.blocks.spare) == 2
    await q.renew()  # nothing came since: the spare goes
    await eventually(lambda: len(given) == 1, "the idle block given back in one call")
    assert not q.blocks.spare and not q.blocks.mine

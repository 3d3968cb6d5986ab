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

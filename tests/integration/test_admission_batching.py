"""Script calls that arrive together share one round trip to a real Redis (admissions and settlements
alike), each still atomic: exact limits under a burst, scripts reloaded when Redis lost them, every
waiter told when Redis is gone or too slow, and the connection in step afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.core.request import InternalRequest, Operation
from gateway.limits import admission as admission_module
from gateway.limits import channel
from gateway.limits import plan as planning
from gateway.limits.admission import Admission, Ask, Settings, TeamPolicy, running
from gateway.limits.limiter import Refusal, Settlement
from gateway.limits.plan import LimitValues, Plan
from gateway.limits.store import RedisLimiter
from tests.support import eventually, turn
from tests.support.redis_servers import free_port

REQUEST = InternalRequest(Operation.COMPLETION, "m", prompts=("hi",))


def plans(n: int, team: str | None = None, request: InternalRequest = REQUEST, **limits: int) -> list[Plan]:
    """``n`` requests of one team key (a new team unless ``team``), each with its lease."""
    team = team or f"t-{uuid.uuid4().hex[:8]}"
    return [planning.build(team, "k", LimitValues(**limits), LimitValues(), request, f"lease{i}") for i in range(n)]


async def test_a_burst_is_pipelined_and_stays_exact(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client)
    refusals = await asyncio.gather(*(limiter.admit(p, 30_000) for p in plans(40, rpm=15, concurrency=100)))
    assert sum(r is None for r in refusals) == 15
    assert {r.check.kind for r in refusals if r is not None} == {"rpm"}
    assert 1 <= limiter.batches < 40
    lone = await limiter.admit(plans(1, rpm=5)[0], 30_000)  # alone: one call, no pipeline
    assert lone is None and limiter.batches < 40


async def test_scripts_lost_by_redis_are_loaded_again(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client)
    await client.script_flush()
    refusals = await asyncio.gather(*(limiter.admit(p, 30_000) for p in plans(10, rpm=4)))
    assert sum(r is None for r in refusals) == 4


async def test_settlements_go_in_one_pipeline_and_survive_a_script_flush(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client)
    batch = plans(6, rpm=100, tpm=10_000)
    assert all(r is None for r in await asyncio.gather(*(limiter.admit(p, 30_000) for p in batch)))
    await client.script_flush()
    await limiter.settle([Settlement(p, 0, 3, 5) for p in batch])
    [usage] = await limiter.usage([batch[0].usage_key])
    assert usage["requests"] == 6 and usage["prompt_tokens"] == 18 and usage["completion_tokens"] == 30


async def test_every_waiter_learns_that_redis_is_gone() -> None:
    dead = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    async with contextlib.aclosing(dead):
        limiter = RedisLimiter(dead)
        results = await asyncio.gather(*(limiter.admit(p, 30_000) for p in plans(5, rpm=4)), return_exceptions=True)
        assert all(isinstance(r, RedisConnectionError) for r in results), results


async def test_a_timed_out_round_trip_fails_its_calls_and_the_next_one_stays_in_step(client: aioredis.Redis) -> None:
    slow = aioredis.Redis.from_url("redis://127.0.0.1:6379/13", socket_timeout=0.2)
    async with contextlib.aclosing(slow):
        limiter = RedisLimiter(slow)
        assert await limiter.admit(plans(1, rpm=100)[0], 30_000) is None  # connected, scripts loaded
        await client.execute_command("CLIENT", "PAUSE", "500", "ALL")  # every other client waits 0.5 s
        late = await asyncio.gather(*(limiter.admit(p, 30_000) for p in plans(3, rpm=100)), return_exceptions=True)
        assert all(isinstance(r, RedisTimeoutError) for r in late), late
        await client.ping()  # answered once the pause is over: the late replies have been sent
        # The late replies (three admissions) went with the old connection: these three get their own
        # answers (one admitted, two refused by rpm=1), not the stale ones
        fresh = await asyncio.gather(*(limiter.admit(p, 30_000) for p in plans(3, rpm=1)))
        assert [r is None for r in fresh] == [True, False, False]


async def test_settlements_ride_with_admissions_that_arrive_with_them(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client)
    done = plans(4, rpm=100, tpm=10_000)
    assert all(r is None for r in await asyncio.gather(*(limiter.admit(p, 30_000) for p in done)))
    before = limiter.batches
    results = await asyncio.gather(
        limiter.settle([Settlement(p, 0, 1, 1) for p in done]),
        *(limiter.admit(p, 30_000) for p in plans(4, rpm=100)),
    )
    assert results[1:] == [None] * 4 and limiter.batches == before + 1  # one round trip for all eight


async def test_a_lone_admission_goes_without_the_held_settlements(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one request at a time: Redis runs a read's every script before it answers, so a settlement in
    # front of the next admission would delay it; it goes on its own once DEFER_SECONDS have passed
    # (long here: the next request arrives within them, however slow the machine)
    monkeypatch.setattr(channel, "DEFER_SECONDS", 1.0)
    limiter = RedisLimiter(client)
    first, second = plans(2, rpm=100, tpm=10_000)
    assert await limiter.admit(first, 30_000) is None
    before = limiter.batches
    settling = asyncio.create_task(limiter.settle([Settlement(first, 0, 1, 1)]))
    await turn()  # the settlement is held; the next request arrives within DEFER_SECONDS
    assert await limiter.admit(second, 30_000) is None
    assert limiter.batches == before + 1 and not settling.done()
    await settling
    assert limiter.batches == before + 2
    usage = await client.hgetall(first.usage_key)
    assert usage[b"requests"] == b"1"


async def test_settlements_held_together_share_one_round_trip(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client)
    batch = plans(3, rpm=100, tpm=10_000)
    for p in batch:
        assert await limiter.admit(p, 30_000) is None
    before = limiter.batches
    await asyncio.gather(*(limiter.settle([Settlement(p, 0, 2, 3)]) for p in batch))
    assert limiter.batches == before + 1  # one round trip when the hold is over, for all three
    usage = await client.hgetall(batch[0].usage_key)
    assert usage[b"requests"] == b"3" and usage[b"completion_tokens"] == b"9"


async def test_an_urgent_settlement_goes_with_a_lone_admission_and_frees_its_slot(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client)
    holder, waiter = plans(2, concurrency=1)
    assert await limiter.admit(holder, 30_000) is None
    refusal = await limiter.admit(waiter, 30_000)
    assert refusal is not None and refusal.check.kind == "conc"
    before = limiter.batches
    _, admitted = await asyncio.gather(
        limiter.settle([Settlement(holder, 0, 1, 1)], urgent=True), limiter.admit(waiter, 30_000)
    )
    assert admitted is None and limiter.batches == before + 1  # the settlement ran first, in the same read


async def test_a_request_waiting_for_a_slot_is_admitted_with_the_release(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request that frees a slot settles at once when another waits for it here: its release
    and the waiter's next admission reach Redis together, in that order (no poll, no refusal)."""
    monkeypatch.setattr(admission_module, "POLL_SECONDS", 30.0)  # only the release wakes the waiter
    calls: list[Refusal | None] = []

    class Counting(RedisLimiter):
        async def admit(self, plan: Plan, lease_ttl_ms: int) -> Refusal | None:
            calls.append(result := await super().admit(plan, lease_ttl_ms))
            return result

    team = f"t-{uuid.uuid4().hex[:8]}"
    admission = Admission(Counting(client), {team: TeamPolicy(limits=LimitValues(concurrency=1))}, Settings())
    async with running(admission):
        holder = await admission.admit(Ask(team, "k", REQUEST))
        waiting = asyncio.create_task(admission.admit(Ask(team, "k", REQUEST)))
        # its first admission is refused; then it waits for a slot
        await eventually(lambda: admission.waiters.size, "the second request waiting for a slot")
        admission.release(holder, 1, 1)
        admitted = await asyncio.wait_for(waiting, 1)
        admission.release(admitted, 1, 1)
    assert [r is None for r in calls] == [True, False, True]


async def test_settlements_of_one_team_key_are_summed_into_one_call(client: aioredis.Redis) -> None:
    """One script call settles them all: every lease released, the token corrections and the usage
    summed, as one call per request would leave them."""
    limiter = RedisLimiter(client)
    batch = plans(5, rpm=100, tpm=10_000, concurrency=10)
    assert all(r is None for r in await asyncio.gather(*(limiter.admit(p, 30_000) for p in batch)))
    conc_key = next(c.key for c in batch[0].checks if c.kind == "conc")
    tpm_key = next(c.key for c in batch[0].checks if c.kind == "tpm")
    assert await client.zcard(conc_key) == 5
    level_before = float((await client.hget(tpm_key, "level")) or 0)
    sent: list[object] = []
    send = limiter._send

    def counting(*args: Any, **kwargs: Any) -> Any:
        sent.append(args)
        return send(*args, **kwargs)

    limiter._send = counting  # type: ignore[method-assign]
    await limiter.settle([Settlement(p, -100, 3, 5) for p in batch])
    assert len(sent) == 1
    assert await client.zcard(conc_key) == 0
    level_after = float((await client.hget(tpm_key, "level")) or 0)
    assert level_after >= level_before + 500  # five refunds of 100 (plus what refilled meanwhile)
    [usage] = await limiter.usage([batch[0].usage_key])
    assert usage["requests"] == 5 and usage["prompt_tokens"] == 15 and usage["completion_tokens"] == 25
    assert usage["key:k:requests"] == 5

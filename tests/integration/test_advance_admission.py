"""Admissions made ahead (``gateway.limits.advance``) against a real Redis: a team key's back-to-back
requests are admitted without a round trip on their path, several to a round trip, limits stay exact
across replicas, near a limit nothing is made ahead, and what nobody took is given back (after its
time, and at shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid

import pytest
import redis.asyncio as aioredis

from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.limits import advance, store
from gateway.limits.limiter import Settlement
from gateway.limits.plan import Plan
from gateway.limits.store import RedisLimiter
from tests.integration import test_admission_batching as batching
from tests.support import eventually

REQUEST = InternalRequest(Operation.COMPLETION, "m", prompts=("hi",), sampling=Sampling(max_tokens=16))
TTL = 30_000


def plans(n: int, team: str | None = None, request: InternalRequest = REQUEST, **limits: int) -> list[Plan]:
    return batching.plans(n, team, request, **limits)


def sized(monkeypatch: pytest.MonkeyPatch, units: int) -> None:
    """Reserves of ``units``, whatever the pace between this test's admissions (``advance.units_for``
    sizes them by it, smaller on a slow machine)."""
    monkeypatch.setattr(advance, "units_for", lambda gap: units)


async def reserve_ready(limiter: RedisLimiter) -> None:
    reserves = limiter.reserves
    assert reserves is not None
    await eventually(lambda: reserves.ready and not reserves.asking, "an admission made ahead")


async def answered(limiter: RedisLimiter) -> None:
    """Until no admission asked ahead is waiting for its answer."""
    reserves = limiter.reserves
    assert reserves is not None
    await eventually(lambda: not reserves.asking, "the admissions asked ahead answered")


async def test_back_to_back_requests_are_admitted_without_a_round_trip(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sized(monkeypatch, advance.AHEAD_UNITS)
    limiter = RedisLimiter(client, advance=True)
    batch = plans(4, rpm=1000, tpm=100_000, concurrency=200)
    for p in batch[:2]:  # the second comes back to back: the next ones are admitted ahead
        assert await limiter.admit(p, TTL) is None
    await reserve_ready(limiter)
    reserve = next(iter(limiter.reserves.ready.values()))  # type: ignore[union-attr]
    assert reserve.units == advance.AHEAD_UNITS  # far from every limit: as many as asked for
    before = limiter.batches
    for p in batch[2:]:
        assert await limiter.admit(p, TTL) is None
    assert limiter.batches == before  # answered at once, from the reserve
    assert [p.lease for p in batch[2:]] == [reserve.lease(1), reserve.lease(2)]  # the leases Redis holds for them
    conc = batch[0].layout.concurrency_keys[0]
    assert await client.zscore(conc, batch[3].lease) is not None
    assert await client.zcard(conc) == 2 + advance.AHEAD_UNITS
    await limiter.settle([Settlement(p, 0, 1, 1) for p in batch], urgent=True)
    assert await client.zcard(conc) == advance.AHEAD_UNITS - 2
    await limiter.close()  # the units never taken are given back
    assert await client.zcard(conc) == 0
    usage = await client.hgetall(batch[0].usage_key)
    assert usage[b"requests"] == b"4"


async def test_the_request_that_takes_a_reserves_last_unit_asks_for_the_next(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sized(monkeypatch, 2)
    limiter = RedisLimiter(client, advance=True)
    batch = plans(6, rpm=1000, concurrency=50)
    for p in batch[:2]:
        assert await limiter.admit(p, TTL) is None
    await reserve_ready(limiter)
    before = limiter.batches
    assert await limiter.admit(batch[2], TTL) is None
    assert limiter.reserves is not None and not limiter.reserves.asking  # one unit left: nothing asked
    assert await limiter.admit(batch[3], TTL) is None  # the last unit: the next reserve is asked for
    await reserve_ready(limiter)
    for p in batch[4:]:
        assert await limiter.admit(p, TTL) is None
    assert limiter.batches == before + 1  # four requests, one round trip (the reserve the fourth asked for)
    await answered(limiter)
    await limiter.settle([Settlement(p, 0, 1, 1) for p in batch], urgent=True)
    await limiter.close()
    assert await client.zcard(batch[0].layout.concurrency_keys[0]) == 0


async def test_two_replicas_never_admit_more_than_the_limit(client: aioredis.Redis) -> None:
    other = aioredis.Redis.from_url("redis://127.0.0.1:6379/13", socket_timeout=2)
    async with contextlib.aclosing(other):
        replicas = [RedisLimiter(client, advance=True), RedisLimiter(other, advance=True)]
        team = f"t-{uuid.uuid4().hex[:8]}"
        admitted = 0
        for i, p in enumerate(plans(40, team=team, rpm=20)):  # one arrival every 3 s: none comes back in the test
            if await replicas[i % 2].admit(p, TTL) is None:
                admitted += 1
            await answered(replicas[i % 2])
        assert 16 <= admitted <= 20  # never more; fewer only by what replicas hold ahead
        for limiter in replicas:
            await limiter.close()
        plain = RedisLimiter(client)
        after = [await plain.admit(p, TTL) for p in plans(25, team=team, rpm=20)]
        assert admitted + after.count(None) == 20  # what was held ahead was given back, exactly


async def test_near_a_limit_each_request_is_admitted_on_its_path(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client, advance=True)
    for limits in ({"concurrency": 3}, {"rpm": 5}, {"tpm": 60}):
        for p in plans(3, **limits):
            before = limiter.batches
            refusal = await limiter.admit(p, TTL)
            await answered(limiter)
            assert limiter.reserves is not None and not limiter.reserves.ready, limits
            assert limiter.batches >= before + 1
            if refusal is not None:
                break


async def test_a_larger_request_is_not_admitted_on_a_smaller_reserve(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client, advance=True)
    team = f"t-{uuid.uuid4().hex[:8]}"
    for p in plans(2, team=team, tpm=100_000):
        assert await limiter.admit(p, TTL) is None
    await reserve_ready(limiter)
    bigger = dataclasses.replace(REQUEST, sampling=Sampling(max_tokens=64))
    big = plans(1, team=team, request=bigger, tpm=100_000)[0]
    estimate = big.estimate
    before = limiter.batches
    assert await limiter.admit(big, TTL) is None
    assert limiter.batches > before and big.estimate == estimate  # its own estimate, on its own path
    small = plans(1, team=team, tpm=100_000)[0]
    reserved = next(iter(limiter.reserves.ready.values())).plan.estimate  # type: ignore[union-attr]
    assert await limiter.admit(small, TTL) is None and small.estimate == reserved
    await limiter.close()


async def test_an_unused_reserve_is_given_back(client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sweep is run here, not by the clock: reserves do not age during the test, then all are old.
    monkeypatch.setattr(advance, "RESERVE_SECONDS", 600.0)
    monkeypatch.setattr(store, "RESERVE_SECONDS", 600.0)
    sized(monkeypatch, 4)
    limiter = RedisLimiter(client, advance=True)
    batch = plans(3, rpm=100, tpm=10_000, concurrency=50)  # rpm: one arrival per 600 ms
    for p in batch[:2]:
        assert await limiter.admit(p, TTL) is None
    await reserve_ready(limiter)
    assert await limiter.admit(batch[2], TTL) is None  # one unit taken, the rest left
    units = next(iter(limiter.reserves.ready.values())).units  # type: ignore[union-attr]
    assert units == 4
    rpm, tpm, conc = batch[0].layout.keys
    tat = float(await client.get(rpm))  # type: ignore[arg-type]
    level, ts = (float(v) for v in await client.hmget(tpm, "level", "ts"))  # type: ignore[arg-type]
    assert await client.zcard(conc) == 2 + units
    assert limiter._sweep is not None
    limiter._sweep.cancel()
    monkeypatch.setattr(advance, "RESERVE_SECONDS", 0.0)  # every reserve is now unused for long enough
    limiter._give_back_stale()
    await asyncio.gather(*limiter._tasks)
    assert await client.zcard(conc) == 3 and limiter.reserves is not None and not limiter.reserves.ready
    assert await client.zscore(conc, batch[2].lease) is not None  # the unit a request took stays
    assert float(await client.get(rpm)) == tat - 600 * (units - 1)  # type: ignore[arg-type]
    level_after, ts_after = (float(v) for v in await client.hmget(tpm, "level", "ts"))  # type: ignore[arg-type]
    refill = (ts_after - ts) * 10_000 / 60_000  # ts: when the reserve was made
    # the units' tokens come back less what the bucket refilled meanwhile (it could not have held more
    # than its cap without the reserve)
    back = max(0.0, (units - 1) * batch[0].estimate - refill)
    assert level_after == pytest.approx(level + refill + back)
    await limiter.close()


async def test_giving_back_never_lets_more_in_than_without_the_reserve(client: aioredis.Redis) -> None:
    # rpm 600, burst 6: one arrival per 100 ms, six at once. Replica A holds a reserve (the third
    # arrival) until time has paid it off; replica B's arrival then is the only one that counts, and
    # A's giving back must not take B's arrival back with it.
    team = f"t-{uuid.uuid4().hex[:8]}"
    a, b = RedisLimiter(client, advance=True), RedisLimiter(client)
    for p in plans(2, team=team, rpm=600, rpm_burst=6):
        assert await a.admit(p, TTL) is None
    await reserve_ready(a)
    rpm_key = plans(1, team=team, rpm=600, rpm_burst=6)[0].layout.keys[0]

    async def paid_off() -> bool:
        """The bucket's theoretical arrival time reached: its three arrivals paid off (Redis's clock)."""
        now_s, now_us = await client.time()
        return float(await client.get(rpm_key)) <= now_s * 1000 + now_us / 1000  # type: ignore[arg-type]

    await eventually(paid_off, "the three arrivals paid off")
    assert await b.admit(plans(1, team=team, rpm=600, rpm_burst=6)[0], TTL) is None
    await a.close()
    burst = await asyncio.gather(*(b.admit(p, TTL) for p in plans(8, team=team, rpm=600, rpm_burst=6)))
    assert burst.count(None) == 5  # six in all with B's arrival: the burst, not one more


async def test_an_old_reserve_is_not_taken_once_its_lease_may_have_expired(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client, advance=True)
    ttl = 300  # ms: a reserve older than half of it is not taken
    batch = plans(3, concurrency=50)
    for p in batch[:2]:
        assert await limiter.admit(p, ttl) is None
    await reserve_ready(limiter)
    await asyncio.sleep(0.2)  # a test of time itself: the reserve grows older than half its lease's TTL
    before = limiter.batches
    assert await limiter.admit(batch[2], ttl) is None
    assert limiter.batches > before and batch[2].lease == "lease2"  # admitted on its own path
    await limiter.close()


async def test_a_reserve_holds_the_estimate_of_the_request_that_asked_for_it(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # after a large request, the small ones that follow are charged its estimate while its reserve
    # lasts (Redis holds that much per unit), their own again after
    sized(monkeypatch, 2)
    limiter = RedisLimiter(client, advance=True)
    team = f"t-{uuid.uuid4().hex[:8]}"
    small = plans(4, team=team, tpm=1_000_000)
    large_request = dataclasses.replace(REQUEST, sampling=Sampling(max_tokens=4000))
    large = plans(1, team=team, request=large_request, tpm=1_000_000)[0]
    assert await limiter.admit(small[0], TTL) is None
    assert await limiter.admit(large, TTL) is None
    own = small[1].estimate
    for p in small[1:]:
        await reserve_ready(limiter)
        assert await limiter.admit(p, TTL) is None
    assert [p.estimate for p in small[1:]] == [large.estimate, large.estimate, own]
    await reserve_ready(limiter)
    assert next(iter(limiter.reserves.ready.values())).plan.estimate == own  # type: ignore[union-attr]
    await limiter.close()

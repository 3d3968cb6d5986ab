"""Every reservation in Redis expires with its holder (issue 35): a gateway killed with requests in
flight leaves its budgets' worst cases and its concurrency leases behind, and they come back within
``limits.lease_ttl`` of its death (taken back by the next admission), its tokens-per-minute reserve as
the bucket refills; a live gateway's reservations are renewed, and each leaves exactly once, by
settlement or by expiry."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml

from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.limits.budget_rules import rules
from gateway.limits.limiter import Settlement
from gateway.limits.plan import LimitValues, Plan, new_lease, planned, tag
from gateway.limits.plan import layout as plan_layout
from gateway.limits.store import RedisLimiter
from gateway.runtime.spend_config import Budget
from tests.integration.conftest import UPSTREAM_KEY_ENV
from tests.integration.spend_rig import LOCAL_JSON, OPENAI, ZONE, budget_spent, settled, spend_config
from tests.redis_servers import RedisServer
from tests.support.gateways import Gateways
from tests.support.waiting import eventually

TTL = 2.0  # limits.lease_ttl here: the bound the docs state, in seconds


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def redis_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


# --- the scripts, against Redis directly --------------------------------------------------------------


def budget_plan(team: str, max_tokens: int = 90) -> Plan:
    budget = Budget(tokens=1000, period="day")
    limits = plan_layout(team, "k1", LimitValues(), LimitValues(), tuple(rules(budget, ZoneInfo(ZONE), "EUR")))
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("x",), sampling=Sampling(max_tokens=max_tokens))
    return planned(team, "k1", limits, request, new_lease())  # a worst case of 3 + max_tokens tokens


async def expired(client: aioredis.Redis, key: str, count: int = 1) -> bool:
    """``count`` reservations held under ``key`` have reached their expiry on Redis's clock."""
    return len(await client.zrange(key, "-inf", await redis_ms(client) - 1, byscore=True)) >= count


async def used(client: aioredis.Redis, plan: Plan) -> int:
    window = plan.windows[0]
    assert window is not None
    return int(await client.hget(plan.checks[0].key, window.add) or 0)


async def admitted(redis: aioredis.Redis) -> tuple[RedisLimiter, Plan, str]:
    """A fresh team's first request, admitted under a token budget with a lease of 300 ms; the key of
    the budget's reservations."""
    limiter, plan = RedisLimiter(redis), budget_plan(f"t-{uuid.uuid4().hex[:8]}")
    assert await limiter.admit(plan, 300) is None
    return limiter, plan, f"{plan.checks[0].key}:held"


async def test_a_reservation_nobody_renews_is_taken_back_by_the_next_admission(redis: aioredis.Redis) -> None:
    limiter, dead, held = await admitted(redis)
    team = dead.team
    assert await used(redis, dead) == 93 and await redis.zcard(held) == 1
    # its holder never renews it: a gateway that died
    await eventually(lambda: expired(redis, held), "the dead holder's reservation expired")
    alive = budget_plan(team, 10)
    assert await limiter.admit(alive, 60_000) is None  # takes the dead one's back first
    assert await used(redis, alive) == 13 and await redis.zcard(held) == 1
    await limiter.settle([Settlement(alive, 0, 1, 2, 1, spent_tokens=3 - 13)])
    assert await used(redis, alive) == 3 and await redis.zcard(held) == 0


async def test_a_renewed_reservation_stays_and_a_late_settlement_charges_the_real_cost(redis: aioredis.Redis) -> None:
    limiter, running, held = await admitted(redis)
    team = running.team
    before = [s for _, s in await redis.zrange(held, 0, -1, withscores=True)]
    await limiter.renew([running], 60_000)  # its gateway is alive
    after = [s for _, s in await redis.zrange(held, 0, -1, withscores=True)]
    assert after[0] > before[0] + 50_000
    assert await limiter.admit(budget_plan(team, 10), 300) is None  # takes nothing of a renewed one
    assert await used(redis, running) == 93 + 13
    # a settlement that comes after its reservation was taken back (its renewals failed) still charges
    # what the request cost, and takes back nothing twice
    late = budget_plan(team, 20)
    assert await limiter.admit(late, 300) is None
    # the 10- and 20-token ones (the renewed one lives on)
    await eventually(lambda: expired(redis, held, 2), "the two unrenewed reservations expired")
    assert await limiter.admit(budget_plan(team, 1), 60_000) is None  # reclaims the expired ones
    assert await used(redis, running) == 93 + 4
    await limiter.settle([Settlement(late, 0, 5, 6, 1, spent_tokens=11 - 23)])
    assert await used(redis, running) == 93 + 4 + 11
    await limiter.settle([Settlement(running, 0, 7, 8, 1, spent_tokens=15 - 93)])
    assert await used(redis, running) == 15 + 4 + 11


# --- two gateway processes, one killed ----------------------------------------------------------------


async def post(session: aiohttp.ClientSession, url: str, prompt: str, max_tokens: int) -> int:
    path, headers, body = OPENAI.request("m", prompt, False, max_tokens=max_tokens)
    try:
        async with session.post(url + path, json=body, headers=headers) as resp:
            await resp.read()
            return resp.status
    except aiohttp.ClientError:  # its gateway was killed
        return 0


async def test_a_killed_gateway_s_reservations_return_within_the_lease_ttl(
    gateways: Gateways, upstream: Any, redis_server: RedisServer, redis: aioredis.Redis, tmp_path: Path
) -> None:
    """20 requests in flight on gateway A, which is killed (SIGKILL: nothing settles, nothing is given
    back): every reservation they hold expires within ``lease_ttl`` of the kill on Redis's clock, and
    gateway B's next admissions find the budgets back at what was really spent and no lease left."""
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    data = spend_config(
        server,
        redis_server.url,
        team,
        budget={"amount": "10", "period": "month"},
        key_budget={"tokens": 10**7, "period": "day"},
        limits={"tpm": 600_000, "concurrency": 40},
    )
    # Admissions made ahead off: the check counts requests' reservations (A's 20, B's ticks), and B's
    # ticks come back to back, so B would hold units for requests not sent yet (a dead replica's units
    # come back as tests/integration/test_advance_budgets.py shows)
    data["limits"] = {"lease_ttl": TTL, "advance": False}
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(yaml.safe_dump(data))
    env = {UPSTREAM_KEY_ENV: "upstream-key"}
    gw_a, gw_b = [await gateways.start("--config", str(cfg), *LOCAL_JSON, env=env) for _ in range(2)]
    url_a, url_b, proc_a = gw_a.url, gw_b.url, gw_a.proc
    base = f"{tag(team)}"
    async with aiohttp.ClientSession() as session:
        hung = [asyncio.create_task(post(session, url_a, "hold on [[fault:hang_before=60]]", 500)) for _ in range(20)]
        # all 20 admitted and at the upstream
        await eventually(lambda: len(server.requests) >= 20, "20 requests at the upstream")
        assert await budget_spent(redis_server.url, team) > 0
        assert await redis.zcard(f"{base}:conc") == 20
        assert await redis.zcard(f"{base}:budget:held") == 20 and await redis.zcard(f"{base}:key:k1:budget:held") == 20
        proc_a.send_signal(signal.SIGKILL)
        proc_a.wait()
        killed = await redis_ms(redis)
        # the bound, on Redis's clock: nothing A held outlives the kill by more than the lease TTL
        for key in (f"{base}:conc", f"{base}:budget:held", f"{base}:key:k1:budget:held"):
            scores = [s for _, s in await redis.zrange(key, 0, -1, withscores=True)]
            assert len(scores) == 20 and max(scores) <= killed + TTL * 1000, key
        assert set(await asyncio.gather(*hung)) == {0}
        ticks = 0

        async def released() -> bool:
            nonlocal ticks
            assert await post(session, url_b, "tick", 1) == 200  # B admits meanwhile: no room was lost
            ticks += 1
            usage = await settled(redis_server.url, team, ticks)
            money = await budget_spent(redis_server.url, team)
            tokens = sum(int(v) for k, v in (await redis.hgetall(f"{base}:key:k1:budget")).items() if k.endswith(b":t"))
            spent = usage["prompt_tokens"] + usage["completion_tokens"]
            return money == usage["spend"] and tokens == spent and await redis.zcard(f"{base}:conc") == 0

        await eventually(released, "every reservation released")
        assert await redis.zcard(f"{base}:budget:held") == 0 and await redis.zcard(f"{base}:key:k1:budget:held") == 0
        # the tokens-per-minute bucket: A's reserve comes back as the bucket refills, within a minute

        async def refilled() -> bool:
            level, ts = await redis.hmget(f"{base}:tpm", "level", "ts")
            return float(level) + (await redis_ms(redis) - float(ts)) * 600_000 / 60_000 >= 600_000

        await eventually(refilled, "the budget refilled")


async def test_the_leases_of_every_running_request_are_renewed_in_one_round_trip(redis: aioredis.Redis) -> None:
    """The lease keeper's round renews each request's leases and reservations, all sent together: one
    round trip for every running request, not one each (a thousand running requests took a thousand
    round trips, one after another, every ``lease_ttl / 3``)."""
    limiter, team = RedisLimiter(redis), f"t-{uuid.uuid4().hex[:8]}"
    running = [budget_plan(team, 10) for _ in range(5)]
    for plan in running:
        assert await limiter.admit(plan, 300) is None
    held = f"{running[0].checks[0].key}:held"
    before, trips = await redis.zrange(held, 0, -1, withscores=True), limiter.batches
    await limiter.renew(running, 60_000)
    assert limiter.batches - trips == 1
    after = dict(await redis.zrange(held, 0, -1, withscores=True))
    assert len(after) == 5 and all(after[member] > score + 30_000 for member, score in before)
    await redis.script_flush()  # a Redis that lost its scripts (a restart): the renewal loads it again
    await limiter.renew(running, 120_000)
    assert all(score > after[member] for member, score in await redis.zrange(held, 0, -1, withscores=True))

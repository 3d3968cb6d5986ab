"""``balance.strategy: kv-shared``: two gateways in front of the same replicas agree, through one real
Redis, on where a prompt's prefix lives; with Redis gone or stalled they route locally and no request
fails."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from backends.pool.balance import Balancer, ReplicaState
from backends.pool.inflight import inflight_key
from backends.pool.prefix_index import SharedRouter
from backends.pool.replicas import ReplicaPool
from gateway.core.request import InternalRequest, Operation
from gateway.runtime.config import Balance, GatewayConfig
from gateway.web.state import GATEWAY
from tests.fakes.upstream import Upstream
from tests.integration.conftest import Gateway, GatewayFactory, config
from tests.integration.dialect_clients import KEY
from tests.redis_servers import RedisServer

AUTH = {"Authorization": f"Bearer {KEY}"}
SYSTEM = "You are a terse assistant who answers in one word. " * 4


def shared_config(urls: list[str], redis_url: str, strategy: str = "kv-shared") -> GatewayConfig:
    # A pool name of its own: the shared Redis outlives the test, and its keys are named by the pool.
    balance = {"strategy": strategy, "prefix_block_chars": 32, "scrape_interval": 5}
    target = {"provider": "vllm", "replicas": urls, "model": "tiny", "name": f"pool-{uuid.uuid4().hex[:8]}"}
    return config([{"name": "m", "targets": [{**target, "balance": balance}]}], redis={"url": redis_url})


def router(gw: Gateway) -> SharedRouter:
    pool = gw.server.app[GATEWAY].models.routes["m"].upstreams[0]
    assert isinstance(pool, ReplicaPool) and isinstance(pool.router, SharedRouter)
    return pool.router


def served(fake: Upstream) -> int:
    return sum(1 for r in fake.requests if r.path.endswith("/completions"))


async def post(gw: Gateway, prompt: str) -> int:
    body: dict[str, Any] = {"model": "m", "prompt": prompt, "max_tokens": 4}
    async with gw.session.post(gw.url + "/v1/completions", json=body, headers=AUTH) as resp:
        await resp.read()
        return resp.status


async def test_two_gateways_send_a_prefix_to_the_same_replica(
    gateway: GatewayFactory, replicas: list[Upstream]
) -> None:
    cfg = shared_config([f.url for f in replicas], "redis://127.0.0.1:6379/12")
    a, b = await gateway(cfg), await gateway(cfg)
    for i in range(12):
        assert await post((a, b)[i % 2], SYSTEM + f"Question {i}?") == 200
    # Each gateway alone would pick its own least-loaded replica for its first request (2 in 3 apart).
    assert sorted(served(f) for f in replicas) == [0, 0, 12]
    assert router(a).hits >= 5 and router(b).hits >= 6
    assert router(a).fallbacks == router(b).fallbacks == 0


async def test_redis_gone_falls_back_to_local_routing(
    gateway: GatewayFactory, replicas: list[Upstream], own_redis: RedisServer
) -> None:
    gw = await gateway(shared_config([f.url for f in replicas], own_redis.url))
    assert await post(gw, SYSTEM + "first?") == 200
    own_redis.stop()
    statuses = [await post(gw, SYSTEM + f"then {i}?") for i in range(6)]
    assert statuses == [200] * 6
    assert router(gw).fallbacks >= 1
    # The local index learned the prefix alongside: it stays on the replica that holds it.
    assert sorted(served(f) for f in replicas) == [0, 0, 7]


async def test_a_stalled_redis_is_not_waited_for(
    gateway: GatewayFactory, replicas: list[Upstream], own_redis: RedisServer
) -> None:
    gw = await gateway(shared_config([f.url for f in replicas], own_redis.url))
    assert await post(gw, SYSTEM + "first?") == 200
    assert own_redis.proc is not None
    os.kill(own_redis.proc.pid, signal.SIGSTOP)  # alive, connections open, answering nothing
    try:
        statuses = await asyncio.gather(*(post(gw, SYSTEM + f"then {i}?") for i in range(4)))
    finally:
        os.kill(own_redis.proc.pid, signal.SIGCONT)
    assert statuses == [200] * 4
    assert router(gw).fallbacks >= 1


@pytest.fixture
async def shared_redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/12")
    yield client
    await client.aclose()


def shared_router(client: aioredis.Redis, pool: str, **settings: Any) -> SharedRouter:
    """One gateway's view of a pool of three replicas (its own loads), sharing ``pool``'s index."""
    urls = [f"http://10.0.0.{i}:8000/v1" for i in range(3)]
    states = [ReplicaState(url, f"r{i}") for i, url in enumerate(urls)]
    # A timeout no busy test host reaches: these tests are about the choices, not about a slow Redis.
    balance = {"strategy": "kv-shared", "prefix_block_chars": 16, "shared_timeout_ms": 60_000, **settings}
    return SharedRouter(Balancer(states, Balance.model_validate(balance)), pool, urls, client)


def completion(prompt: str) -> InternalRequest:
    return InternalRequest(Operation.COMPLETION, model="m", prompts=(prompt,))


async def first_choice(router: SharedRouter, prompt: str, session: str | None = None) -> int:
    return (await router.order(completion(prompt), session, 0.0))[0][0]


async def occupy(client: aioredis.Redis, router: SharedRouter, replica: int, n: int) -> list[str]:
    """``n`` requests in flight on ``replica`` from some other gateway: leases as the script writes them."""
    seconds, micros = await client.time()
    until = seconds * 1000 + micros // 1000 + 600_000
    leases = [f"other:{uuid.uuid4().hex}" for _ in range(n)]
    await client.zadd(inflight_key(router.target, router.urls[replica]), dict.fromkeys(leases, until))
    return leases


async def test_two_routers_keep_a_prefix_home_while_load_allows(shared_redis: aioredis.Redis) -> None:
    pool = f"unit-{uuid.uuid4().hex[:8]}"
    a, b = shared_router(shared_redis, pool, affinity_slack=1), shared_router(shared_redis, pool, affinity_slack=1)
    home = await first_choice(a, SYSTEM + "first?")
    assert [await first_choice((a, b)[i % 2], SYSTEM + f"again {i}?") for i in range(6)] == [home] * 6
    assert a.hits == 3 and b.hits == 3 and a.yields == b.yields == 0
    # Busier than the slack allows, by every gateway's count: the least loaded takes it, and a yield is
    # counted; the prefix now has a second copy there, but its home stays where it was.
    busy = await occupy(shared_redis, a, home, 2)
    spill = await first_choice(a, SYSTEM + "third?")
    assert spill != home and a.yields == 1
    # Both gateways see the same counts: while the home stays busy, its overflow goes to the same second
    # copy, from either gateway, even where a fresh replica is as idle.
    assert {await first_choice((a, b)[i % 2], SYSTEM + f"busy {i}?") for i in range(6)} == {spill}
    # Both copies busy: the third replica, and the home again as soon as it is free.
    await occupy(shared_redis, a, spill, 2)
    third = await first_choice(b, SYSTEM + "everywhere?")
    assert third not in (home, spill)
    await shared_redis.zrem(inflight_key(pool, a.urls[home]), *busy)
    assert await first_choice(a, SYSTEM + "home again?") == home


async def test_a_cached_prefix_outranks_a_session(shared_redis: aioredis.Redis) -> None:
    r = shared_router(shared_redis, f"unit-{uuid.uuid4().hex[:8]}")
    sessions = [f"conversation-{i}" for i in range(12)]
    homes = {s: await first_choice(r, f"{s} opens with its own words, long enough for blocks", s) for s in sessions}
    assert len(set(homes.values())) == 3  # nothing cached: new prefixes are shared out
    cached = await first_choice(r, SYSTEM + "a")
    # The system prompt is cached: every session that sends it goes there, whatever its own replica.
    assert {await first_choice(r, SYSTEM + "b", s) for s in sessions} == {cached}


async def test_a_prompt_without_a_full_block_goes_to_its_session(shared_redis: aioredis.Redis) -> None:
    """Homes share out new prefixes; a prompt too short for a block places none, so however many
    prefixes its session's replica is home to, the session decides (while load allows)."""
    r = shared_router(shared_redis, f"unit-{uuid.uuid4().hex[:8]}")
    own = await first_choice(r, "hi", "s")
    for i in range(9):  # new prefixes, a third of them homed on the session's replica
        await first_choice(r, f"document {i} with words enough for blocks")
    assert [await first_choice(r, f"hi {i}", "s") for i in range(6)] == [own] * 6


async def test_the_script_chooses_as_the_local_prefix_index_does(shared_redis: aioredis.Redis) -> None:
    """The Lua script and ``Balancer.counted_order`` are one rule written twice: replayed over the same
    plans (random in-flight counts, some of them run out, engine gauges, events' hints, sessions and
    prompts sharing a few prefixes), they choose alike."""
    shared = shared_router(shared_redis, f"unit-{uuid.uuid4().hex[:8]}", affinity_slack=1)
    local = Balancer(shared.balancer.replicas, shared.balancer.settings)
    rng = random.Random(7)
    yielded = hinted = 0
    for step in range(200):
        counts = []
        for i, state in enumerate(shared.balancer.replicas):
            state.kv_usage, state.scraped_at = rng.choice([0.0, 0.125, 0.3]), rng.choice([0.0, -100.0])
            state.batch = rng.choice([0.0, 1.0, 2.0])
            key = inflight_key(shared.target, shared.urls[i])
            await shared_redis.delete(key)
            live, gone = rng.choice([0, 0, 1, 2, 3]), rng.choice([0, 1])
            seconds, micros = await shared_redis.time()
            now_ms = seconds * 1000 + micros // 1000
            members = {f"live{k}": now_ms + 600_000 for k in range(live)} | {f"gone{k}": 1 for k in range(gone)}
            if members:
                await shared_redis.zadd(key, members)
            counts.append(live)
        # a prompt without a full block now and then: no prefix to place, its session decides
        prompt = f"prefix {rng.randrange(12)} " * 3 + "x" * rng.randrange(40) if rng.random() < 0.85 else "hi"
        plan = shared.balancer.plan(completion(prompt), rng.choice([None, "a", "b"]), 0.0)
        hints = {i: rng.choice([0, 0, 1, 2]) for i in plan.ranked} if rng.random() < 0.3 else None
        want = local.counted_order(plan, [counts[i] for i in plan.ranked], 0.0, hints)[0]
        assert await shared._shared_choice(plan, 0.0, None, hints) == want, step
        local.record(plan.hashes, want)
        yielded, hinted = shared.yields, hinted + bool(hints and hints.get(want))
    # the replay went through every kind of choice
    assert shared.hits > 120 and yielded > 5 and hinted > 10

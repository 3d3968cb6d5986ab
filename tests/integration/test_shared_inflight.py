"""The in-flight counts every ``kv-shared`` gateway keeps in Redis (``backends/pool/inflight.py``): a request
counts on its replica from the choice to its end, in every gateway's view; one that ends, fails over,
is answered too late or belongs to a gateway that died stops counting; a count never drifts."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.pool.inflight import inflight_key
from backends.pool.prefix_index import SharedRouter
from tests.fakes.upstream import Upstream, start
from tests.integration.conftest import GatewayFactory
from tests.integration.test_shared_prefix import AUTH, SYSTEM, completion, occupy, router, shared_config, shared_router
from tests.redis_servers import RedisServer

SHARED = "redis://127.0.0.1:6379/12"


@pytest.fixture
async def fakes() -> AsyncIterator[list[Upstream]]:
    started = [await start("vllm", models=("tiny",)) for _ in range(3)]
    yield started
    await asyncio.gather(*(f.close() for f in started))


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()


async def counts(client: aioredis.Redis, r: SharedRouter) -> list[int]:
    """Each replica's live leases, as the script counts them (run-out ones left out)."""
    seconds, micros = await client.time()
    now_ms = seconds * 1000 + micros // 1000
    return [await client.zcount(inflight_key(r.target, url), f"({now_ms}", "+inf") for url in r.urls]


async def test_a_request_counts_in_both_gateways_until_it_ends(gateway: GatewayFactory, fakes: list[Upstream]) -> None:
    cfg = shared_config([f.url for f in fakes], SHARED)
    a, b = await gateway(cfg), await gateway(cfg)
    client = aioredis.Redis.from_url(SHARED)
    body: dict[str, Any] = {"model": "m", "prompt": SYSTEM + "slow [[fault:slow=0.05]]", "max_tokens": 3}
    try:
        async with a.session.post(a.url + "/v1/completions", json=body | {"stream": True}, headers=AUTH) as resp:
            assert resp.status == 200
            await resp.content.readline()  # the stream has started: its lease is in Redis
            during = await counts(client, router(a))
            await resp.read()
        assert sorted(during) == [0, 0, 1]
        await router(a).leases.close()  # what the stream's end queued, sent
        assert await counts(client, router(b)) == [0, 0, 0]
    finally:
        await client.aclose()


async def test_two_gateways_first_requests_count_twice(gateway: GatewayFactory, fakes: list[Upstream]) -> None:
    """Each pool names its leases itself: two gateways (or forked workers) whose first requests run at
    once hold two leases, not one under the same name."""
    cfg = shared_config([f.url for f in fakes], SHARED)
    a, b = await gateway(cfg), await gateway(cfg)
    client = aioredis.Redis.from_url(SHARED)
    body: dict[str, Any] = {"model": "m", "prompt": SYSTEM + "slow [[fault:slow=0.05]]", "max_tokens": 3}
    try:
        async with (
            a.session.post(a.url + "/v1/completions", json=body | {"stream": True}, headers=AUTH) as first,
            b.session.post(b.url + "/v1/completions", json=body | {"stream": True}, headers=AUTH) as second,
        ):
            assert first.status == second.status == 200
            await first.content.readline()
            await second.content.readline()  # both streams have started: both leases are in Redis
            assert sum(await counts(client, router(a))) == 2
            await first.read()
            await second.read()
    finally:
        await client.aclose()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_replica_failing_before_the_first_byte_releases_its_count(
    gateway: GatewayFactory, fakes: list[Upstream], stream: bool
) -> None:
    gw = await gateway(shared_config([f.url for f in fakes], SHARED))
    client = aioredis.Redis.from_url(SHARED)
    shared = router(gw)
    try:
        async with gw.session.post(
            gw.url + "/v1/completions", json={"model": "m", "prompt": SYSTEM}, headers=AUTH
        ) as r:
            assert r.status == 200
        home = max(range(3), key=lambda i: len(fakes[i].requests))
        fakes[home].state.faults = "[[fault:status=503]]"  # up for the scraper, failing every request
        body = {"model": "m", "prompt": SYSTEM + "again? [[fault:slow=0.05]]", "max_tokens": 3, "stream": stream}
        async with gw.session.post(gw.url + "/v1/completions", json=body, headers=AUTH) as resp:
            assert resp.status == 200
            if stream:
                await resp.content.readline()  # served elsewhere, and still running
            else:
                await resp.read()  # a completion is released before it is answered
                assert shared.leases.live == {}
            # The failed try's lease is gone once what is queued is sent (retries count locally only).
            await shared.leases.send(renew=False)
            assert await counts(client, shared) == [0, 0, 0]
            assert len(fakes[home].requests) == 2
    finally:
        await client.aclose()


async def test_an_answer_that_came_too_late_leaves_no_count(private_redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(private_redis.url)
    r = shared_router(client, f"unit-{uuid.uuid4().hex[:8]}", shared_timeout_ms=50)
    try:
        await r.start()
        assert private_redis.proc is not None
        os.kill(private_redis.proc.pid, signal.SIGSTOP)  # the call is sent; the script runs only later
        try:
            await r.order(completion(SYSTEM + "late?"), None, 0.0, "late-lease")
        finally:
            os.kill(private_redis.proc.pid, signal.SIGCONT)
        assert r.fallbacks == 1 and r.leases.live == {}
        await r.leases.close()  # the removal is sent after the script's late run, on the same connection
        assert await counts(client, r) == [0, 0, 0]
    finally:
        await client.aclose()


async def test_while_redis_is_out_the_last_counts_still_steer(private_redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(private_redis.url)
    r = shared_router(client, f"unit-{uuid.uuid4().hex[:8]}", affinity_slack=1)

    async def routed(prompt: str, now: float) -> int:
        order, hashes = await r.order(completion(SYSTEM + prompt), None, now)
        r.balancer.record(hashes, order[0])  # as the pool does once the replica answers
        return order[0]

    try:
        home = await routed("first?", 0.0)
        assert [await routed(f"again {i}?", 0.0) for i in range(2)] == [home, home]
        await occupy(client, r, home, 3)  # another gateway's requests: the home is busy
        assert await routed("second?", 0.0) != home
        private_redis.stop()
        # Within a scrape of the last answer its counts decide (the local gauges know of no load)...
        assert await routed("third?", 0.5) != home
        assert r.fallbacks == 1
        # ...later the local order does, which sends the prefix home (served most often there).
        assert await routed("fourth?", 5.0) == home
    finally:
        await client.aclose()


# --- the counts never drift: random interleavings of two gateways' requests ----------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 1), st.integers(0, 3)),  # gateway, prompt
        st.tuples(st.just("end"), st.integers(0, 99), st.just(0)),  # one of the live requests
        st.tuples(st.just("renew"), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("crash"), st.integers(0, 1), st.just(0)),  # a gateway dies; another replaces it
    ),
    max_size=40,
)


async def replay(ops: list[tuple[str, int, int]]) -> None:
    client = aioredis.Redis.from_url(SHARED)
    pool = f"prop-{uuid.uuid4().hex[:8]}"
    gateways = [shared_router(client, pool), shared_router(client, pool)]
    live: dict[str, tuple[int, int]] = {}  # lease → (gateway, replica): what should count
    try:
        for n, (op, x, y) in enumerate(ops):
            g = gateways[x % 2]
            if op == "start":
                want = [sum(1 for _, rep in live.values() if rep == i) for i in range(3)]
                lease = f"{pool}:{n}"
                replica = (await g.order(completion(f"prompt {y} " * 4 + str(n)), None, 0.0, lease))[0][0]
                assert g._seen is not None and [g._seen[1][i] for i in range(3)] == want
                live[lease] = (x % 2, replica)
            elif op == "end" and live:
                lease = sorted(live)[x % len(live)]
                gateways[live.pop(lease)[0]].release(lease)
            elif op == "renew":
                await g.leases.send(renew=True)
            elif op == "crash":
                # Its leases are never released nor renewed: as Redis sees them once they ran out.
                mine = [lease for lease, (w, _) in live.items() if w == x % 2]
                for lease in mine:
                    key = inflight_key(pool, g.urls[live.pop(lease)[1]])
                    assert await client.zadd(key, {lease: 1}, xx=True, ch=True) == 1
                gateways[x % 2] = shared_router(client, pool)
            for w in gateways:
                await w.leases.send(renew=False)
            assert await counts(client, gateways[0]) == [sum(1 for _, r in live.values() if r == i) for i in range(3)]
            for w, other in enumerate(gateways):
                assert set(other.leases.live) == {lease for lease, (v, _) in live.items() if v == w}
    finally:
        await client.aclose()


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_the_counts_are_the_requests_still_running(ops: list[tuple[str, int, int]]) -> None:
    asyncio.run(replay(ops))


async def test_a_burst_of_completions_leaves_nothing_counted(gateway: GatewayFactory, fakes: list[Upstream]) -> None:
    """Non-streaming answers release as they return, concurrent ones included."""
    cfg = shared_config([f.url for f in fakes], SHARED)
    gw = await gateway(cfg)
    client = aioredis.Redis.from_url(SHARED)
    try:

        async def one(i: int) -> int:
            body = {"model": "m", "prompt": SYSTEM + f"q{i}?", "max_tokens": 2}
            async with gw.session.post(gw.url + "/v1/completions", json=body, headers=AUTH) as resp:
                await resp.read()
                return resp.status

        assert await asyncio.gather(*(one(i) for i in range(12))) == [200] * 12
        await router(gw).leases.close()
        assert await counts(client, router(gw)) == [0, 0, 0]
    finally:
        await client.aclose()

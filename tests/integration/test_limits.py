"""Limits against a real Redis (and the in-process twin): exact request, token and concurrency
limits, waiting for slots until the deadline, refusals in the client's dialect, usage accounting."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.runtime.config import hash_key, parse_config
from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, target
from tests.integration.dialect_clients import BY_NAME, KEY, without_team
from tests.support import eventually
from tests.support.redis_servers import RedisServer

OPENAI = BY_NAME["openai"]


def limited(server: Any, redis_url: str | None, team: str, cluster: bool = False, **team_cfg: Any) -> Any:
    data: dict[str, Any] = {
        "models": [{"name": "m", "targets": [target(server, "openai")]}],
        "teams": [{"id": team, "keys": [{"id": "k1", "sha256": hash_key(KEY)}], **team_cfg}],
    }
    if redis_url is not None:
        # generous: on a loaded 2-core test machine a 50 ms timeout would trip the fail-open policy
        data["redis"] = {"url": redis_url, "cluster": cluster, "timeout_ms": 1000}
    return parse_config(data)


async def usage_hash(url: str, team: str, requests: int) -> dict[str, int]:
    """The team's usage hash once ``requests`` requests are settled in it (settling follows the answer)."""
    client = aioredis.Redis.from_url(url)

    async def usage() -> dict[str, int]:
        keys = [k async for k in client.scan_iter(match=f"llmgw:{{{team}}}:usage:*")]
        found = {k.decode(): int(v) for k, v in (await client.hgetall(keys[0])).items()} if keys else {}
        return found if found.get("requests", 0) >= requests else {}

    try:
        return await eventually(usage, f"{requests} requests settled in team {team}'s usage")
    finally:
        await client.aclose()


def admission_of(gw: Any) -> Any:
    return gw.server.app[GATEWAY].admission


async def burst(gw: Any, n: int, prompt: str = "x", ingress: Any = OPENAI, **fields: Any) -> list[Any]:
    return list(await asyncio.gather(*(gw.send(ingress, "m", prompt, False, **fields) for _ in range(n))))


@pytest.mark.parametrize("backend", ["redis", "cluster", "local"])
async def test_requests_per_minute_exact(
    gateway: GatewayFactory, upstream: Any, request: pytest.FixtureRequest, backend: str
) -> None:
    url = None
    if backend != "local":
        url = request.getfixturevalue("redis_cluster" if backend == "cluster" else "redis_server").url
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    gw = await gateway(limited(server, url, team, cluster=backend == "cluster", limits={"rpm": 7}))
    answers = await burst(gw, 20)
    assert sorted(a.status for a in answers) == [200] * 7 + [429] * 13
    refused = next(a for a in answers if a.status == 429).body["error"]
    assert refused["type"] == "rate_limit_error" and "requests per minute" in refused["message"]
    assert len(server.requests) == 7


async def test_refusal_headers_and_dialects(gateway: GatewayFactory, upstream: Any, redis_server: RedisServer) -> None:
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    gw = await gateway(limited(server, redis_server.url, team, limits={"rpm": 1}))
    path, headers, body = OPENAI.request("m", "x", False)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
    for ingress in (OPENAI, BY_NAME["sgp"], BY_NAME["friendli"], BY_NAME["octoai"]):
        path, headers, body = without_team(ingress).request("m", "x", False)
        async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
            assert resp.status == 429, await resp.text()
            assert int(resp.headers["Retry-After"]) >= 1
            assert resp.headers["X-RateLimit-Limit-Requests"] == "1"


async def test_tokens_per_minute_within_one_request(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    gw = await gateway(limited(server, redis_server.url, team, limits={"tpm": 60}))
    used = ok = 0
    for _ in range(30):
        answer = await gw.send(OPENAI, "m", "count my tokens", False, max_tokens=4)
        if answer.status == 429:
            assert "tokens per minute" in answer.body["error"]["message"]
            continue
        used, ok = used + answer.usage["total_tokens"], ok + 1
        await usage_hash(redis_server.url, team, ok)  # settlement runs after the answer
    one = len("count my tokens") + 2 + 4  # an estimate: the prompt's bound (gateway.core.prompt) + max_tokens
    assert 60 - one <= used <= 60 + one
    too_big = await gw.send(OPENAI, "m", "x", False, max_tokens=500)
    assert too_big.status == 429 and "exceeds" in too_big.body["error"]["message"]


async def test_concurrency_waits_fairly_until_the_deadline(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    gw = await gateway(limited(server, redis_server.url, team, limits={"concurrency": 2}))
    # each answer takes ~0.3 s upstream; 6 of them through 2 slots finish in ~1 s, all admitted
    answers = await burst(gw, 6, "slow [[fault:hang_before=0.3]]")
    assert [a.status for a in answers] == [200] * 6
    # with a Friendli deadline shorter than the wait, the waiting requests get Friendli's 429
    fr = without_team(BY_NAME["friendli2024"])
    answers = await burst(gw, 6, "slow [[fault:hang_before=0.5]]", ingress=fr, timeout_microseconds=300_000)
    statuses = sorted(a.status for a in answers)
    assert statuses.count(429) >= 3 and all(s in (200, 429) for s in statuses)


async def test_usage_is_accounted(gateway: GatewayFactory, upstream: Any, redis_server: RedisServer) -> None:
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    gw = await gateway(limited(server, redis_server.url, team, limits={"rpm": 1000}))
    answers = await burst(gw, 5) + [await gw.send(OPENAI, "m", "x", True)]
    usage = await usage_hash(redis_server.url, team, 6)
    assert usage["requests"] == 6 and usage["key:k1:requests"] == 6
    assert usage["completion_tokens"] == sum(a.usage["completion_tokens"] for a in answers)


@pytest.mark.parametrize("backend", ["redis", "cluster"])
async def test_back_to_back_requests_are_admitted_ahead_and_nothing_is_left_held(
    gateway: GatewayFactory, upstream: Any, request: pytest.FixtureRequest, backend: str
) -> None:
    url = request.getfixturevalue("redis_cluster" if backend == "cluster" else "redis_server").url
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    limits = {"rpm": 60, "concurrency": 50}  # rpm: one arrival a second, none comes back during the test
    gw = await gateway(limited(server, url, team, cluster=backend == "cluster", limits=limits))

    async def admitted_ahead() -> float:
        metrics = await (await gw.session.get(gw.url + "/metrics")).text()
        return float(next(x for x in metrics.splitlines() if 'decision="admit_ahead"' in x).rsplit(" ", 1)[1])

    before = await admitted_ahead()
    reserves = admission_of(gw).limiter.redis.reserves
    for i in range(6):
        assert (await gw.send(OPENAI, "m", "x", False)).status == 200
        if i:  # from the second on, the next admission is asked for ahead and answered meanwhile
            await eventually(lambda: reserves.ready and not reserves.asking, "the next admission made ahead")
    assert await admitted_ahead() - before == 4  # the first two on their path, then each on the one made ahead
    await gw.server.close()  # shutting down gives back the admissions made ahead and not taken
    client: Any = aioredis.RedisCluster.from_url(url) if backend == "cluster" else aioredis.Redis.from_url(url)
    now_s, now_us = await client.time()
    tat = float(await client.get(f"llmgw:{{{team}}}:rpm"))
    assert 5000 - 1000 < tat - (now_s * 1000 + now_us // 1000) <= 6000  # six arrivals, not seven
    assert await client.zcard(f"llmgw:{{{team}}}:conc") == 0
    await client.aclose()


async def test_redis_outage_follows_policy(gateway: GatewayFactory, upstream: Any) -> None:
    redis = RedisServer().start()
    try:
        server = await upstream("openai")
        open_team, closed_team = f"o-{uuid.uuid4().hex[:6]}", f"c-{uuid.uuid4().hex[:6]}"
        gw_open = await gateway(limited(server, redis.url, open_team, limits={"rpm": 3}))
        assert [a.status for a in await burst(gw_open, 3)] == [200] * 3
        redis.stop()
        loop = asyncio.get_running_loop()
        began = loop.time()
        during = await burst(gw_open, 6)
        assert loop.time() - began < 2, "a dead Redis must not hold requests"
        # fail-open: this process enforces its share of the limit on its own, counting the three it
        # used through Redis this minute (it admitted three more, doubling the limit, before)
        assert sorted(a.status for a in during) == [429] * 6
        async with gw_open.session.get(gw_open.url + "/ready") as resp:
            assert "failure policy in force" in (await resp.json())["limits"]
        assert await redis_up(gw_open) == 0
        cfg = limited(server, redis.url, closed_team, limits={"rpm": 3})
        cfg = cfg.model_copy(update={"redis": cfg.redis.model_copy(update={"on_failure": {"rpm": "closed"}})})
        gw_closed = await gateway(cfg)
        assert {a.status for a in await burst(gw_closed, 2)} == {503}
        redis.start()
        breaker = admission_of(gw_closed).limiter
        await eventually(lambda: time.monotonic() >= breaker.down_until, "the breaker's time to retry Redis")
        resumed = await burst(gw_closed, 5)
        assert sorted(a.status for a in resumed) == [200] * 3 + [429] * 2
        # the first gateway's connection broke with the outage: it connects again, and the restarted
        # Redis (which kept nothing) counts afresh, where this process alone would refuse all five
        again = await burst(gw_open, 5)
        assert sorted(a.status for a in again) == [200] * 3 + [429] * 2
        async with gw_open.session.get(gw_open.url + "/ready") as resp:
            assert "failure policy in force" not in (await resp.json())["limits"]
        assert await redis_up(gw_open) == 1
    finally:
        redis.close()


async def redis_up(gw: Any) -> float:
    """``gateway_redis_up`` as the gateway's /metrics shows it."""
    async with gw.session.get(gw.url + "/metrics") as resp:
        text = await resp.text()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith("gateway_redis_up ")))


async def test_usage_of_a_team_without_limits_is_summed_per_key_and_round(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    """Nothing to correct: the requests of one round settle as one sum per key (one script call),
    and the hash holds the same totals as request-by-request settling would."""
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    gw = await gateway(limited(server, redis_server.url, team))
    answers = await burst(gw, 8) + [await gw.send(OPENAI, "m", "x", True)]
    usage = await usage_hash(redis_server.url, team, 9)
    assert usage["requests"] == 9 and usage["key:k1:requests"] == 9
    assert usage["completion_tokens"] == sum(a.usage["completion_tokens"] for a in answers)
    assert usage["prompt_tokens"] == sum(a.usage["prompt_tokens"] for a in answers)

"""A served gateway's ``/metrics`` tells how its replica pools routed: requests through a pool of vLLM
stand-ins, the shared prefix index in a real Redis (stopped, or stalled, to make it fall back), and
only configured names and fixed words as labels, whatever the client sent."""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gateway.core.pool_report import CAUSES, OUTCOMES, SOURCES
from gateway.runtime.config import GatewayConfig
from tests.fakes.upstream import Upstream
from tests.integration.conftest import Gateway, GatewayFactory, config
from tests.integration.dialect_clients import KEY
from tests.redis_servers import RedisServer

AUTH = {"Authorization": f"Bearer {KEY}"}
SYSTEM = "You are a terse assistant who answers in one word. " * 4
SESSION = 'evil"} gateway_fake{x="1\\ <script>'  # what a header can carry
MODEL = SESSION + "\n\u202e"
ROUTING = ("gateway_routing_decisions", "gateway_shared_prefix_fallbacks")


def pool_config(urls: list[str], redis_url: str, **settings: Any) -> tuple[GatewayConfig, str]:
    # A pool name of its own: the shared Redis, and the process's metrics, outlive the test.
    name = f"pool-{uuid.uuid4().hex[:8]}"
    # Redis is given a second: these tests make it fail on purpose, never by a crowded host's stall.
    balance = {"strategy": "kv-shared", "prefix_block_chars": 32, "scrape_interval": 5, "shared_timeout_ms": 1000}
    balance |= settings
    target = {"provider": "vllm", "replicas": urls, "model": "tiny", "name": name, "balance": balance}
    return config([{"name": "m", "targets": [target]}], redis={"url": redis_url}), name


async def post(gw: Gateway, prompt: str, model: str = "m", session: str | None = None) -> int:
    body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": 4}
    headers = {**AUTH, **({"X-Session-Id": session} if session is not None else {})}
    async with gw.session.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
        await resp.read()
        return resp.status


async def scrape(gw: Gateway) -> str:
    async with gw.session.get(gw.url + "/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


def routing(text: str, target: str) -> dict[tuple[str, ...], float]:
    """The pool's non-zero routing series: (metric, label values after the target) → value."""
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name in ROUTING:
            for s in family.samples:
                if s.name.endswith("_total") and s.labels["target"] == target and s.value:
                    words = (s.labels.get(k) for k in ("source", "outcome", "cause"))
                    out[(family.name, *(w for w in words if w is not None))] = s.value
    return out


async def test_the_decisions_show_on_metrics_and_no_client_string_does(
    gateway: GatewayFactory, replicas: list[Upstream]
) -> None:
    cfg, name = pool_config([f.url for f in replicas], "redis://127.0.0.1:6379/12")
    gw = await gateway(cfg)
    for i in range(6):
        assert await post(gw, SYSTEM + f"Question {i}?", session=SESSION if i % 2 else None) == 200
    assert await post(gw, "Hi", session=SESSION) == 200  # no full block: its session's replica
    assert await post(gw, "Hi") == 200  # nor a session: load alone
    assert await post(gw, SYSTEM, model=MODEL) == 404  # no model of that name: not routed at all
    text = await scrape(gw)
    # Every request of a kv-shared pool is counted in Redis, so the shared script chose all eight.
    assert routing(text, name) == {
        ("gateway_routing_decisions", "shared", "new"): 1,
        ("gateway_routing_decisions", "shared", "cached"): 5,
        ("gateway_routing_decisions", "shared", "session"): 1,
        ("gateway_routing_decisions", "shared", "no_affinity"): 1,
    }
    assert "evil" not in text and "\u202e" not in text and "gateway_fake" not in text
    words = {*SOURCES, *OUTCOMES, *CAUSES}
    for family in text_string_to_metric_families(text):
        if family.name in ROUTING:
            for s in family.samples:
                assert {v for k, v in s.labels.items() if k != "target"} <= words, s


async def test_redis_gone_shows_as_fallbacks_and_local_decisions(
    gateway: GatewayFactory, replicas: list[Upstream], own_redis: RedisServer
) -> None:
    cfg, name = pool_config([f.url for f in replicas], own_redis.url)
    gw = await gateway(cfg)
    assert await post(gw, SYSTEM + "first?") == 200
    own_redis.stop()
    assert [await post(gw, SYSTEM + f"then {i}?") for i in range(4)] == [200] * 4
    seen = routing(await scrape(gw), name)
    # The first failure keeps Redis out for 2 s: the requests meanwhile are the local index's, which
    # learned the prefix alongside the shared one.
    assert seen[("gateway_shared_prefix_fallbacks", "error")] >= 1
    assert seen[("gateway_routing_decisions", "shared", "new")] == 1
    assert seen[("gateway_routing_decisions", "local", "cached")] == 4


async def test_a_stalled_redis_shows_as_timeouts(
    gateway: GatewayFactory, replicas: list[Upstream], own_redis: RedisServer
) -> None:
    # Either bound may fire, the index's own (20 ms) or the Redis client's (50 ms): both are timeouts.
    cfg, name = pool_config([f.url for f in replicas], own_redis.url, shared_timeout_ms=20)
    gw = await gateway(cfg)
    assert own_redis.proc is not None
    os.kill(own_redis.proc.pid, signal.SIGSTOP)  # alive, accepting connections, answering nothing
    try:
        assert await post(gw, SYSTEM + "then?") == 200
    finally:
        os.kill(own_redis.proc.pid, signal.SIGCONT)
    assert routing(await scrape(gw), name) == {
        ("gateway_shared_prefix_fallbacks", "timeout"): 1,
        ("gateway_routing_decisions", "local", "new"): 1,
    }


async def test_a_pool_without_affinity_counts_load_alone(gateway: GatewayFactory, replicas: list[Upstream]) -> None:
    cfg, name = pool_config([f.url for f in replicas], "redis://127.0.0.1:6379/12", strategy="round-robin")
    gw = await gateway(cfg)
    for i in range(3):
        assert await post(gw, SYSTEM + f"Question {i}?", session="s") == 200
    assert routing(await scrape(gw), name) == {("gateway_routing_decisions", "local", "no_affinity"): 3}

"""Log lines that a request (or a Redis in trouble) can cause are bounded: a target failing on every
request, or the shared prefix index failing on every routing decision, makes one line a period
(``gateway/runtime/throttle.py``), the rest counted into the next, never a line each."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from aiohttp import web

from backends.pool import prefix_index
from gateway.routing import table
from tests.fakes.upstream import Upstream
from tests.integration.conftest import GatewayFactory, completions_server, config, target
from tests.integration.dialect_clients import KEY
from tests.integration.test_shared_prefix import SYSTEM, post, router, shared_config
from tests.redis_servers import RedisServer

REQUESTS = 20
AUTH = {"Authorization": f"Bearer {KEY}"}


def warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


async def test_a_target_failing_every_request_is_one_line_not_one_a_request(
    gateway: GatewayFactory, upstream: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(table, "FAILURES_TO_COOL", 10**6)  # never cooled: tried, and failing, every time
    hits: list[int] = []

    async def fail(request: web.Request) -> web.Response:
        hits.append(1)
        return web.json_response({"error": {"message": "down"}}, status=500)

    good = await upstream("openai", models=["up-model"])
    async with completions_server(fail) as bad:
        broken = {"provider": "openai", "base_url": str(bad.make_url("")).rstrip("/") + "/v1", "model": "up-model"}
        models = [{"name": "m", "targets": [{**broken, "weight": 1e9}, {**target(good, "openai"), "weight": 1e-9}]}]
        gw = await gateway(config(models))
        for _ in range(REQUESTS):
            body = {"model": "m", "prompt": "hi", "max_tokens": 2}
            async with gw.session.post(gw.url + "/v1/completions", json=body, headers=AUTH) as resp:
                assert resp.status == 200, await resp.text()
    assert len(hits) >= REQUESTS // 2  # the failing target was tried first nearly every time
    assert len(warnings(caplog, "falling back")) == 1


async def test_the_shared_prefix_index_failing_every_decision_is_one_line(
    gateway: GatewayFactory,
    replicas: list[Upstream],
    own_redis: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(prefix_index, "RETRY_SECONDS", 0.0)  # every decision asks the dead Redis again
    gw = await gateway(shared_config([f.url for f in replicas], own_redis.url))
    assert await post(gw, SYSTEM + "first?") == 200
    own_redis.stop()
    for i in range(REQUESTS):
        assert await post(gw, SYSTEM + f"then {i}?") == 200
    assert router(gw).fallbacks >= REQUESTS
    assert len(warnings(caplog, "shared prefix index unavailable")) == 1

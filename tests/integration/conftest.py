"""A gateway on a real socket in front of local vendor upstreams on real sockets."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.runtime.config import GatewayConfig, hash_key, parse_config
from gateway.web.app import create_app
from tests.fakes import upstream as fake
from tests.integration.dialect_clients import KEY, Answer, Ingress, body_of, read
from tests.support.gateways import Gateways, Served
from tests.support.redis_servers import RedisCluster, RedisServer

UPSTREAM_KEY_ENV = "TEST_UPSTREAM_KEY"
os.environ[UPSTREAM_KEY_ENV] = "upstream-key"


def config(models: list[dict[str, Any]], **extra: Any) -> GatewayConfig:
    teams = [
        {"id": "team1", "keys": [{"id": "k1", "sha256": hash_key(KEY)}]},
        {"id": "team2", "keys": []},
    ]
    return parse_config({"models": models, "teams": teams, **extra})


def target(server: fake.Upstream, kind: str, **extra: Any) -> dict[str, Any]:
    provider = "friendli" if kind == "friendli2024" else kind
    return {"provider": provider, "base_url": server.url, "model": "up-model", "api_key_env": UPSTREAM_KEY_ENV, **extra}


class Gateway:
    def __init__(self, server: TestServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    @property
    def url(self) -> str:
        return str(self.server.make_url(""))

    async def send(self, ingress: Ingress, model: str, prompt: str, stream: bool, **fields: Any) -> Answer:
        path, headers, body = ingress.request(model, prompt, stream, **fields)
        async with self.session.post(self.url + path, json=body, headers=headers) as resp:
            raw, _ = await body_of(resp)  # a stream that failed may end cut short
            if stream and resp.status == 200:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
            return read(ingress, resp.status, raw, stream)


GatewayFactory = Callable[[GatewayConfig], Awaitable[Gateway]]

# Per-hop timeouts for a target whose answer breaks: a stall past ``idle`` trips within the test, the
# rest leave a healthy answer room on a busy machine.
BREAK_TIMEOUTS = {"connect": 1, "first_byte": 2, "idle": 0.5, "total": 10}


async def faulty_gateway(
    gateway: GatewayFactory, upstream: Callable[..., Awaitable[fake.Upstream]], kind: str, fault: str, **timeouts: float
) -> tuple[fake.Upstream, Gateway]:
    """Model ``m`` on one target of ``kind`` whose upstream has ``fault`` (a fault marker's body:
    ``reset_after=2``), with ``BREAK_TIMEOUTS`` (``timeouts`` overriding some): the upstream and the gateway."""
    server = await upstream(kind, faults=f"[[fault:{fault}]]")
    bounds = {**BREAK_TIMEOUTS, **timeouts}
    return server, await gateway(config([{"name": "m", "targets": [target(server, kind, timeouts=bounds)]}]))


@pytest.fixture
async def gateway() -> AsyncIterator[GatewayFactory]:
    servers: list[TestServer] = []
    session = aiohttp.ClientSession()

    async def make(cfg: GatewayConfig) -> Gateway:
        server = TestServer(create_app(cfg), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return Gateway(server, session)

    yield make
    await session.close()
    for s in servers:
        await s.close()


@pytest.fixture
async def gateways(tmp_path: Path) -> AsyncIterator[Gateways]:
    """``llm-gateway serve`` subprocesses, stopped at the end of the test."""
    started = Gateways(tmp_path)
    yield started
    await started.close()


@pytest.fixture
async def serve(gateways: Gateways) -> Callable[..., Awaitable[Served]]:
    """``serve(args, env, nofile=None)``: one ``llm-gateway serve`` (``nofile``: the (soft, hard)
    descriptor limit it starts with), ready."""

    async def start(args: list[str], env: dict[str, str], nofile: tuple[int, int] | None = None) -> Served:
        return await gateways.start(*args, env=env, nofile=nofile)

    return start


@pytest.fixture
async def client() -> AsyncIterator[aioredis.Redis]:
    """A client of the shared Redis (a database of its own) for tests of the limit scripts."""
    redis = aioredis.Redis.from_url("redis://127.0.0.1:6379/13", socket_timeout=2)
    yield redis
    await redis.aclose()


@pytest.fixture
async def upstream() -> AsyncIterator[Callable[..., Awaitable[fake.Upstream]]]:
    started: list[fake.Upstream] = []

    async def make(kind: str, **kwargs: Any) -> fake.Upstream:
        server = await fake.start(kind, **kwargs)
        started.append(server)
        return server

    yield make
    for s in started:
        await s.close()


@pytest.fixture
async def replicas() -> AsyncIterator[list[fake.Upstream]]:
    """Three vLLM stand-ins serving ``tiny``: a pool's replicas."""
    started = [await fake.start("vllm", models=("tiny",)) for _ in range(3)]
    yield started
    for f in started:
        await f.close()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis of the test's own, which it may stop or stall."""
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
async def peek(own_redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A client of the test's own Redis beside the gateway's, to look at (and pause) it."""
    client = aioredis.Redis.from_url(own_redis.url, socket_timeout=5)
    yield client
    await client.aclose()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """A Redis of the test module's own, shared by its tests (whose counts are that module's alone)."""
    with contextlib.closing(RedisServer().start()) as server:
        yield server


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-node Redis Cluster of the test module's own."""
    with contextlib.closing(RedisCluster().start()) as cluster:
        yield cluster


@contextlib.asynccontextmanager
async def completions_server(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], app: web.Application | None = None
) -> AsyncIterator[TestServer]:
    """A stand-in upstream answering POST /v1/completions with ``handler`` on a free loopback port
    (``app``: one whose state the caller set up)."""
    app = app or web.Application()
    app.router.add_post("/v1/completions", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()

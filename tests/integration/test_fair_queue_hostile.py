"""Hostile input at a model's queue, on every ingress path that reaches one: any X-Gateway-Priority
value (empty, unknown, mixed case, huge, repeated, not ASCII, not UTF-8) gets the class or a 4xx in
the path's own dialect naming the header, never a 5xx; a client gone while queued, on any path,
streamed or not, with the queue in process or in Redis, leaves no slot and no waiter behind."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

from gateway.limits.fairq import ModelQueue
from gateway.limits.fairq_script import keys
from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.test_ingress_fuzz import ANSWER_TIMEOUT, PATHS, Path, base, encode, named, shapes
from tests.integration.test_responses import scripted_target, scripted_upstream
from tests.support import eventually
from tests.support.redis_servers import RedisServer

HEADER = "X-Gateway-Priority"
# every path whose request takes a slot of its model (count_tokens calls no model)
QUEUED = [p for p in PATHS if p.path != "/v1/messages/count_tokens"]
PATH_IDS = [p.path + ("" if p.model == "m" else f"@{p.model}") for p in QUEUED]
# values the header may take: a known class, trimmed
GOOD = [b"batch", b"interactive", b"  batch\t"]
BAD = [
    b"",
    b"   ",
    b"Batch",
    b"BATCH",
    b"urgent",
    b"batch, interactive",
    b"batch;q=1",
    b"x" * 6000,
    "intéractive".encode(),
    b"\xff\xfe",
]
REPEATED = [(b"batch", b"batch"), (b"batch", b"interactive"), (b"interactive", b"")]


def model_of(p: Path) -> str:
    return "e" if p.path == "/v1/embeddings" else p.model


def body(p: Path, stream: bool = False) -> bytes:
    data = base(p) | {"model": model_of(p)}
    return encode(data | {"stream": True} if stream else data)


async def gateway_with_queues(gateway: GatewayFactory, upstream: Any, **extra: Any) -> AsyncIterator[Any]:
    server = await upstream("openai")
    queue = {"capacity": 1, "max_waiting": 8, "timeout": 60}
    async with scripted_upstream() as embedder:
        models = [
            {"name": "m", "targets": [target(server, "vllm")], "queue": queue},
            {"name": "o", "targets": [target(server, "openai")], "queue": queue},
            {"name": "e", "kind": "embedding", "targets": [scripted_target(embedder)], "queue": queue},
        ]
        yield await gateway(config(models, **extra))


@pytest.fixture
async def gw(gateway: GatewayFactory, upstream: Any) -> AsyncIterator[Any]:
    async for g in gateway_with_queues(gateway, upstream):
        yield g


@pytest.fixture
async def shared_gw(gateway: GatewayFactory, upstream: Any, redis_server: RedisServer) -> AsyncIterator[Any]:
    client = aioredis.from_url(redis_server.url)
    await client.flushall()
    try:
        async for g in gateway_with_queues(gateway, upstream, redis={"url": redis_server.url, "timeout_ms": 1000}):
            g.redis = client
            yield g
    finally:
        await client.aclose()


def exchange(url: str, p: Path, raw: bytes, values: tuple[bytes, ...]) -> tuple[int, bytes]:
    """One request with the header given once per value, as the bytes are (http.client, not aiohttp,
    which would refuse to send some of them)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=ANSWER_TIMEOUT)
    try:
        conn.putrequest("POST", p.path)
        for name, value in p.headers.items():
            conn.putheader(name, value)
        for v in values:
            conn.putheader(HEADER, v)
        conn.putheader("Content-Length", str(len(raw)))
        conn.endheaders(raw)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def refused_naming_the_header(p: Path, raw: bytes, status: int, answer: bytes) -> None:
    assert status in (400, 422), (status, answer[:300])
    reply = json.loads(answer)
    named(reply, next(iter(shapes(p, raw))))  # the path's own envelope, or the check raises
    assert HEADER.encode() in answer, answer[:300]


@pytest.mark.parametrize("p", QUEUED, ids=PATH_IDS)
async def test_a_hostile_priority_header_gets_the_class_or_a_4xx_naming_it(gw: Any, p: Path) -> None:
    raw = body(p)

    def run() -> None:
        for value in GOOD:
            status, answer = exchange(gw.url, p, raw, (value,))
            assert status == 200, (value, status, answer[:300])
        for value in BAD:
            status, answer = exchange(gw.url, p, raw, (value,))
            refused_naming_the_header(p, raw, status, answer)
        for values in REPEATED:  # two answers to one question: which was meant is not the gateway's guess
            status, answer = exchange(gw.url, p, raw, values)
            refused_naming_the_header(p, raw, status, answer)

    await asyncio.to_thread(run)


def queue_of(gw: Any, p: Path) -> ModelQueue:
    queue: ModelQueue = gw.server.app[GATEWAY].fair.queues[model_of(p)]
    return queue


async def gone_while_queued(gw: Any, p: Path, stream: bool) -> None:
    """A raw request that waits in the queue, then its client closes the socket."""
    parts = urlsplit(gw.url)
    raw = body(p, stream)
    head = "".join(f"{k}: {v}\r\n" for k, v in {**p.headers, "Content-Length": str(len(raw))}.items())
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(f"POST {p.path} HTTP/1.1\r\nHost: gw\r\n{head}\r\n".encode() + raw)
    await writer.drain()
    queue = queue_of(gw, p)
    await eventually(lambda: queue.local.waiting == 1, f"{p.path} queued")
    writer.close()
    await eventually(lambda: queue.local.waiting == 0, f"{p.path}: the gone client out of the queue")
    assert not reader.at_eof() or not await reader.read()  # it was never answered


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("p", QUEUED, ids=PATH_IDS)
async def test_a_client_gone_while_queued_leaks_no_slot_on_any_path(gw: Any, p: Path, stream: bool) -> None:
    if stream and p.path == "/v1/embeddings":
        pytest.skip("embeddings have no stream")
    queue = queue_of(gw, p)
    policy = gw.server.app[GATEWAY].fair.policy
    held = await queue.enter(policy.ticket("holder", "team1", "k1", None, None), lambda: None)  # the one slot
    for _ in range(3):
        await gone_while_queued(gw, p, stream)
    held.release()
    await eventually(lambda: queue.local.running == 0, "every slot given back")
    status, answer = await asyncio.to_thread(exchange, gw.url, p, body(p), ())
    assert status == 200, answer[:300]  # the capacity is whole: the next request takes the slot at once
    assert queue.local.running == 0 and queue.local.waiting == 0


async def shared_counts(gw: Any, model: str) -> tuple[int, int]:
    """(slots leased, waiters) of ``model``'s queue in Redis."""
    run, alive = keys(model, 2)[:2]
    return await gw.redis.zcard(run), await gw.redis.zcard(alive)


@pytest.mark.parametrize("p", QUEUED, ids=PATH_IDS)
async def test_a_client_gone_while_queued_in_redis_leaks_no_lease_on_any_path(shared_gw: Any, p: Path) -> None:
    gw, model = shared_gw, model_of(p)
    queue = queue_of(gw, p)
    policy = gw.server.app[GATEWAY].fair.policy
    held = await queue.enter(policy.ticket("holder", "team1", "k1", None, None), lambda: None)
    parts = urlsplit(gw.url)
    raw = body(p)
    head = "".join(f"{k}: {v}\r\n" for k, v in {**p.headers, "Content-Length": str(len(raw))}.items())
    _, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(f"POST {p.path} HTTP/1.1\r\nHost: gw\r\n{head}\r\n".encode() + raw)
    await writer.drain()
    await eventually(lambda: _is(shared_counts(gw, model), (1, 1)), f"{p.path} queued in Redis")
    writer.close()
    await eventually(lambda: _is(shared_counts(gw, model), (1, 0)), f"{p.path}: the gone client out of Redis")
    held.release()
    await eventually(lambda: _is(shared_counts(gw, model), (0, 0)), "every lease given back")
    status, answer = await asyncio.to_thread(exchange, gw.url, p, body(p), ())
    assert status == 200, answer[:300]
    await eventually(lambda: _is(shared_counts(gw, model), (0, 0)), "the last request's lease given back")


async def _is(counts: Any, want: tuple[int, int]) -> bool:
    return bool(await counts == want)

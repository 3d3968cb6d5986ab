"""An upstream that answers valid JSON of the wrong shape fails as a target does: 502 in the client's
dialect when it is the only one, a fallback to the next target before the first byte otherwise, and a
metric and a log line naming the target. Never a 500."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import REGISTRY

from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import INGRESSES, Ingress
from tests.support import eventually

CHOICE = {"index": 0, "text": "hi", "finish_reason": "stop"}
WHOLE = [
    b'{"choices": [1]}',
    b'{"choices": "abc"}',
    b"[1, 2]",
    b'{"choices": [{"index": "abc", "text": "x", "finish_reason": "stop"}]}',
    json.dumps({"choices": [CHOICE], "usage": {"prompt_tokens": "many", "completion_tokens": 1}}).encode(),
    json.dumps({"choices": [CHOICE], "usage": {"prompt_tokens": 1, "completion_tokens": 1e20}}).encode(),
    b'{"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}], "usage": {"prompt_tokens": 1e400}}',
    json.dumps({"choices": [CHOICE], "usage": {"prompt_tokens": -3, "completion_tokens": 1}}).encode(),
]
FIRST_EVENTS = [b'data: {"choices": [1]}\n\n', b"data: [1, 2]\n\n", b'data: {"choices": [{"index": "abc"}]}\n\n']

Canned = Callable[[bytes, bool], Awaitable[str]]


@pytest.fixture
async def canned() -> AsyncIterator[Canned]:
    """Servers that answer every POST with the bytes given (as a stream when ``stream``), 200."""
    servers: list[TestServer] = []

    async def start(body: bytes, stream: bool) -> str:
        async def answer(request: web.Request) -> web.StreamResponse:
            await request.read()
            if not stream:
                return web.Response(body=body, content_type="application/json")
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(body)
            await resp.write_eof(b"data: [DONE]\n\n")
            return resp

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        server = TestServer(app)
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/v1"))

    yield start
    for server in servers:
        await server.close()


def failures(target_name: str) -> float:
    total = 0.0
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name == "gateway_upstream_failures_total" and sample.labels.get("target") == target_name:
                total += sample.value
    return total


async def send(gw: Any, ingress: Ingress, stream: bool) -> tuple[int, str]:
    path, headers, body = ingress.request("m", "hi", stream)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        return resp.status, await resp.text()


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
@pytest.mark.parametrize("body", WHOLE, ids=range(len(WHOLE)))
async def test_a_wrong_shape_alone_is_502_in_the_dialect(
    gateway: GatewayFactory, canned: Canned, ingress: Ingress, body: bytes
) -> None:
    url = await canned(body, False)
    gw = await gateway(config([{"name": "m", "targets": [{"provider": "openai", "base_url": url, "name": "bad"}]}]))
    status, text = await send(gw, ingress, False)
    assert status == 502 and "'bad' answered in an unexpected shape" in text, text


@pytest.mark.parametrize("body", WHOLE, ids=range(len(WHOLE)))
async def test_a_wrong_shape_falls_back_to_the_next_target(
    gateway: GatewayFactory, canned: Canned, upstream: Any, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # tried first: one weighted pick, all but certain at these weights
    bad = {"provider": "openai", "base_url": await canned(body, False), "name": "bad-whole", "weight": 1e6}
    good = target(await upstream("openai"), "openai", weight=1e-6)
    gw = await gateway(config([{"name": "m", "targets": [bad, good]}]))
    before = failures("bad-whole")
    status, _ = await send(gw, INGRESSES[0], False)
    assert status == 200

    def counted() -> bool:
        """The request's record ends just after its answer; its metrics come with its batch."""
        gw.server.app[GATEWAY].backlog.drain()
        return failures("bad-whole") > before

    await eventually(counted, "the failure counted")
    assert failures("bad-whole") == before + 1
    assert any("bad-whole" in r.getMessage() and "upstream_malformed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
@pytest.mark.parametrize("first", FIRST_EVENTS, ids=range(len(FIRST_EVENTS)))
async def test_a_malformed_first_event_falls_back_before_the_first_byte(
    gateway: GatewayFactory, canned: Canned, upstream: Any, ingress: Ingress, first: bytes
) -> None:
    bad = {"provider": "openai", "base_url": await canned(first, True), "name": "bad-stream", "weight": 1e6}
    good = target(await upstream("openai"), "openai", weight=1e-6)
    gw = await gateway(config([{"name": "m", "targets": [bad, good]}]))
    status, text = await send(gw, ingress, True)
    assert status == 200 and "unexpected shape" not in text
    alone = await gateway(config([{"name": "m", "targets": [bad]}]))
    status, text = await send(alone, ingress, True)
    assert status == 502 and "unexpected shape" in text

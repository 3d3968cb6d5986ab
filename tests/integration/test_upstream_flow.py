"""Upstream connections: a long stream that the client reads slowly fills the gateway's buffers until
the upstream connection is paused, and it is resumed; a complete stream's connection is kept for the
next request, also when the upstream ends its body after the stream's last event (as model servers
do)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from aiohttp.client_proto import ResponseHandler
from aiohttp.test_utils import TestServer

from adapters import pool
from tests.integration.conftest import UPSTREAM_KEY_ENV, GatewayFactory, completions_server, config
from tests.integration.dialect_clients import BEARER

EVENTS = 30_000  # 7.5 MB: more than the sockets (a send buffer grows to 4 MB here) and aiohttp hold meanwhile
TEXT = " word" * 20


def chunk(i: int) -> bytes:
    body = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "up-model"}
    finish = "length" if i == EVENTS - 1 else None
    body["choices"] = [{"index": 0, "text": TEXT, "logprobs": None, "finish_reason": finish}]
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


@pytest.fixture
async def long_upstream() -> AsyncIterator[str]:
    async def completions(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(EVENTS):  # one HTTP chunk per event, as model servers write them
            await resp.write(chunk(i))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async with completions_server(completions) as server:
        yield str(server.make_url("/v1"))


async def test_a_paused_upstream_connection_is_resumed(
    gateway: GatewayFactory, long_upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream_port = urlsplit(long_upstream).port
    resumed = {"paused": 0}  # resumes of the gateway's connection to the upstream while it was paused
    resume = ResponseHandler.resume_reading

    def counted(self: ResponseHandler, *args: Any, **kwargs: Any) -> None:
        # the gateway's connection to the upstream, not the test client's to the gateway
        if self.transport is not None and self.transport.get_extra_info("peername")[1] == upstream_port:
            resumed["paused"] += self._reading_paused
        resume(self, *args, **kwargs)

    monkeypatch.setattr(ResponseHandler, "resume_reading", counted)
    target = {"provider": "openai", "base_url": long_upstream, "model": "up-model", "api_key_env": UPSTREAM_KEY_ENV}
    gw = await gateway(config([{"name": "m", "targets": [target]}]))
    body = {"model": "m", "prompt": "p", "stream": True}
    async with gw.session.post(gw.url + "/v1/completions", json=body, headers=BEARER) as resp:
        assert resp.status == 200
        await asyncio.sleep(1.0)  # meanwhile the upstream writes on, until every buffer is full
        async with asyncio.timeout(30):  # a connection left paused would never end the stream
            raw = await resp.read()
    events = [line[6:] for line in raw.split(b"\n\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    choices = [json.loads(event)["choices"][0] for event in events[:-1]]
    assert [c["text"] for c in choices].count(TEXT) == EVENTS  # every chunk, none lost while paused
    assert choices[-1]["finish_reason"] == "length"
    assert resumed["paused"] > 0  # the connection was paused, and resumed


SEEN = web.AppKey("seen", dict[str, Any])  # "peers": each request's client port; "lag": see below


@pytest.fixture
async def lagging_upstream() -> AsyncIterator[TestServer]:
    """Ends each stream's body ``lag`` seconds after its [DONE] (vLLM's server writes the end in a write
    of its own); notes the client port of every request."""

    async def completions(request: web.Request) -> web.StreamResponse:
        request.app[SEEN]["peers"].append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(EVENTS - 3, EVENTS):
            await resp.write(chunk(i))
        await resp.write(b"data: [DONE]\n\n")
        await asyncio.sleep(request.app[SEEN]["lag"])
        await resp.write_eof()
        return resp

    app = web.Application()
    app[SEEN] = {"peers": [], "lag": 0.05}
    async with completions_server(completions, app) as server:
        yield server


async def stream_through(gateway: GatewayFactory, upstream: TestServer, times: int) -> list[float]:
    """Streams ``times`` answers in a row; how long each took the client."""
    url = str(upstream.make_url("/v1"))
    target = {"provider": "openai", "base_url": url, "model": "up-model", "api_key_env": UPSTREAM_KEY_ENV}
    gw = await gateway(config([{"name": "m", "targets": [target]}]))
    body = {"model": "m", "prompt": "p", "stream": True}
    took, loop = [], asyncio.get_running_loop()
    for _ in range(times):
        started = loop.time()
        async with gw.session.post(gw.url + "/v1/completions", json=body, headers=BEARER) as resp:
            raw = await resp.read()
        took.append(loop.time() - started)
        assert raw.endswith(b'"finish_reason":"length"}]}\n\ndata: [DONE]\n\n')
        await asyncio.sleep(upstream.app[SEEN]["lag"] + 0.1)
    return took


async def test_a_complete_stream_keeps_its_connection(gateway: GatewayFactory, lagging_upstream: TestServer) -> None:
    await stream_through(gateway, lagging_upstream, 4)
    peers = lagging_upstream.app[SEEN]["peers"]
    assert len(peers) == 4 and len(set(peers)) == 1  # one connection for all four


async def test_a_body_that_does_not_end_loses_its_connection(
    gateway: GatewayFactory, lagging_upstream: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool, "FINISH_SECONDS", 0.4)
    lagging_upstream.app[SEEN]["lag"] = 0.6  # longer than the gateway waits for the body's end
    took = await stream_through(gateway, lagging_upstream, 2)
    assert max(took) < 0.3  # the client's answer did not wait for it either
    assert len(set(lagging_upstream.app[SEEN]["peers"])) == 2  # the first was closed: the second came on a new one

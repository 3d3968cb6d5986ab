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

from adapters import pool
from tests.fakes import upstream as fake
from tests.integration.conftest import UPSTREAM_KEY_ENV, GatewayFactory, completions_server, config, target
from tests.integration.dialect_clients import BEARER
from tests.support import eventually

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
    # pauses of the gateway's connection to the upstream, and resumes of it while it was paused
    seen = {"paused": 0, "resumed": 0}
    pause, resume = ResponseHandler.pause_reading, ResponseHandler.resume_reading

    def upstreams(protocol: ResponseHandler) -> bool:
        """The gateway's connection to the upstream, not the test client's to the gateway."""
        transport = protocol.transport
        return transport is not None and transport.get_extra_info("peername")[1] == upstream_port

    def paused(self: ResponseHandler) -> None:
        seen["paused"] += upstreams(self)
        pause(self)

    def resumed(self: ResponseHandler, *args: Any, **kwargs: Any) -> None:
        if upstreams(self):
            seen["resumed"] += self._reading_paused
        resume(self, *args, **kwargs)

    monkeypatch.setattr(ResponseHandler, "pause_reading", paused)
    monkeypatch.setattr(ResponseHandler, "resume_reading", resumed)
    target = {"provider": "openai", "base_url": long_upstream, "model": "up-model", "api_key_env": UPSTREAM_KEY_ENV}
    gw = await gateway(config([{"name": "m", "targets": [target]}]))
    body = {"model": "m", "prompt": "p", "stream": True}
    async with gw.session.post(gw.url + "/v1/completions", json=body, headers=BEARER) as resp:
        assert resp.status == 200
        # meanwhile the upstream writes on, until every buffer is full
        await eventually(lambda: seen["paused"], "the upstream connection paused")
        async with asyncio.timeout(30):  # a connection left paused would never end the stream
            raw = await resp.read()
    events = [line[6:] for line in raw.split(b"\n\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    choices = [json.loads(event)["choices"][0] for event in events[:-1]]
    assert [c["text"] for c in choices].count(TEXT) == EVENTS  # every chunk, none lost while paused
    assert choices[-1]["finish_reason"] == "length"
    assert seen["resumed"] > 0  # the connection was paused, and resumed


LAG = "[[fault:end_after={}]]"  # each stream's body ends this long after its [DONE], as vLLM's does


async def stream_through(
    gateway: GatewayFactory, upstream: fake.Upstream, times: int, monkeypatch: pytest.MonkeyPatch
) -> list[bool]:
    """Streams ``times`` answers in a row, each once the last one's upstream connection is settled (its
    body's end read, or given up on); for each, whether the client had its whole answer while the
    upstream's body was still open."""
    finishing: set[object] = set()
    finish = pool._finish

    async def tracked(resp: Any) -> None:
        finishing.add(resp)
        try:
            await finish(resp)
        finally:
            finishing.discard(resp)

    monkeypatch.setattr(pool, "_finish", tracked)
    gw = await gateway(config([{"name": "m", "targets": [target(upstream, "openai")]}]))
    body = {"model": "m", "prompt": "p", "stream": True}
    early = []
    for _ in range(times):
        async with gw.session.post(gw.url + "/v1/completions", json=body, headers=BEARER) as resp:
            raw = await resp.read()
        early.append(upstream.active == 1)
        assert raw.endswith(b"data: [DONE]\n\n")
        await eventually(lambda: not upstream.active and not finishing, "the stream's body ended at both ends")
    return early


def peers(upstream: fake.Upstream) -> list[int]:
    return [r.peer_port for r in upstream.requests]


async def test_a_complete_stream_keeps_its_connection(
    gateway: GatewayFactory, upstream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    lagging = await upstream("openai", faults=LAG.format(0.05))
    await stream_through(gateway, lagging, 4, monkeypatch)
    assert len(peers(lagging)) == 4 and len(set(peers(lagging))) == 1  # one connection for all four


async def test_a_body_that_does_not_end_loses_its_connection(
    gateway: GatewayFactory, upstream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool, "FINISH_SECONDS", 0.4)
    lagging = await upstream("openai", faults=LAG.format(0.6))  # longer than the gateway waits for the end
    early = await stream_through(gateway, lagging, 2, monkeypatch)
    assert all(early)  # the client's answer did not wait for it either
    assert len(set(peers(lagging))) == 2  # the first was closed: the second came on a new one

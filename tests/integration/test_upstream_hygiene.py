"""What the gateway's upstream calls never carry along: cookies an upstream set (every team's requests
share the gateway's connections to an upstream, and OpenAI's Cloudflare sets two on every answer), and
its credentials to wherever a redirect points (aiohttp drops ``Authorization`` on a redirect to another
host, not SGP's ``x-api-key``; an API's POST is never redirected in normal operation). And what an
upstream may make the gateway hold: a broken or hostile one fails instead of growing its memory."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import adapters.http
from gateway.core.errors import UpstreamFailed
from gateway.web.app import build_upstream
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BY_NAME

TO = web.AppKey("to", dict[str, str])


async def test_cookies_an_upstream_sets_are_not_sent_back(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai")
    # by host name: a cookie jar keeps no cookies from a bare IP address
    named = {**target(server, "openai"), "base_url": server.url.replace("127.0.0.1", "localhost")}
    gw = await gateway(config([{"name": "m", "targets": [named]}]))
    for stream in (False, True, False):
        answer = await gw.send(BY_NAME["openai"], "m", "Say something", stream)
        assert answer.status == 200, answer.raw
    assert len(server.requests) == 3
    assert all("cookie" not in r.headers for r in server.requests)


@pytest.fixture
async def redirector() -> AsyncIterator[TestServer]:
    """Answers every request with a 307 to the same path on the host set in ``app[TO]["url"]``."""

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(request.app[TO]["url"] + request.path)

    app = web.Application()
    app[TO] = {}
    app.router.add_route("*", "/{tail:.*}", redirect)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_redirects_are_not_followed(
    gateway: GatewayFactory, upstream: Any, redirector: TestServer, stream: bool
) -> None:
    elsewhere = await upstream("sgp")
    redirector.app[TO]["url"] = elsewhere.url.replace("127.0.0.1", "localhost")  # another origin
    moved = {**target(elsewhere, "sgp"), "base_url": str(redirector.make_url("")).rstrip("/")}
    gw = await gateway(config([{"name": "m", "targets": [moved]}]))
    answer = await gw.send(BY_NAME["sgp"], "m", "Say something", stream)
    assert answer.status == 502, answer.raw
    assert "redirect" in answer.raw.decode() and "307" in answer.raw.decode()
    assert elsewhere.requests == []  # the upstream key never left for the other host


async def test_the_model_list_probe_follows_no_redirect(upstream: Any, redirector: TestServer) -> None:
    elsewhere = await upstream("sgp")
    redirector.app[TO]["url"] = elsewhere.url.replace("127.0.0.1", "localhost")
    moved = {**target(elsewhere, "sgp"), "base_url": str(redirector.make_url("")).rstrip("/")}
    cfg = config([{"name": "m", "targets": [moved]}])
    probe = build_upstream(cfg.models[0].targets[0], "m")
    try:
        # followed, the other host would have answered its model list (and seen the key header)
        with pytest.raises(UpstreamFailed):
            await probe.list_models()
    finally:
        await probe.close()


# --- what an upstream may make the gateway hold ---------------------------------------------------

CAP = 64 * 1024


@pytest.fixture
async def oversized() -> AsyncIterator[TestServer]:
    """An OpenAI-compatible upstream that answers too much: a chunked body past the cap, a body whose
    length is past it, a small gzip body that expands past it, or a stream whose first event never
    ends."""

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b'data: {"id":"x","choices":[{"index":0,"text":"')
            for _ in range(4):
                await resp.write(b"x" * (CAP // 2))  # no end of line, ever
            await asyncio.Event().wait()  # a deliberate hang: the gateway's cap on an event cuts the stream
            return resp
        if body.get("prompt") == "length":
            return web.Response(body=b" " * (2 * CAP), content_type="application/json")
        if body.get("prompt") == "gzip":  # a few hundred bytes on the wire
            packed = gzip.compress(b" " * (4 * CAP) + b"{}")
            headers = {"Content-Encoding": "gzip"}
            return web.Response(body=packed, content_type="application/json", headers=headers)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for _ in range(4):
            await resp.write(b" " * (CAP // 2))
        await resp.write_eof(b"{}")
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


@pytest.mark.parametrize("prompt", ["chunked", "length", "gzip", "stream"])
async def test_an_upstream_that_answers_too_much_fails_in_dialect(
    gateway: GatewayFactory, oversized: TestServer, monkeypatch: pytest.MonkeyPatch, prompt: str
) -> None:
    monkeypatch.setattr(adapters.http, "MAX_ANSWER_BYTES", CAP)
    monkeypatch.setattr(adapters.http, "MAX_EVENT_BYTES", CAP)
    base = str(oversized.make_url("/v1"))
    gw = await gateway(config([{"name": "m", "targets": [{"provider": "openai", "base_url": base}]}]))
    answer = await gw.send(BY_NAME["openai"], "m", prompt, prompt == "stream")
    assert answer.status == 502, answer.raw
    assert f"more than {CAP} bytes" in answer.raw.decode()

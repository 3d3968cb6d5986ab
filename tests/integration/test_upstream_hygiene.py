"""What the gateway's upstream calls never carry along: cookies an upstream set (every team's requests
share the gateway's connections to an upstream, and OpenAI's Cloudflare sets two on every answer), and
its credentials to wherever a redirect points (aiohttp drops ``Authorization`` on a redirect to another
host, not SGP's ``x-api-key``; an API's POST is never redirected in normal operation)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

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
    assert len(server.v.headers) == 3
    assert all("Cookie" not in headers for headers in server.v.headers)


@pytest.fixture
async def redirector() -> AsyncIterator[TestServer]:
    """Answers every POST with a 307 to the same path on the host set in ``app[TO]["url"]``."""

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(request.app[TO]["url"] + request.path)

    app = web.Application()
    app[TO] = {}
    app.router.add_post("/{tail:.*}", redirect)
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
    assert elsewhere.v.headers == []  # the upstream key never left for the other host

"""Upstream cookies are never kept: every team's requests share the gateway's connections to an
upstream, so a cookie one answer sets (OpenAI's Cloudflare sets two on every answer) must not ride
along on the next team's request."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BY_NAME


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

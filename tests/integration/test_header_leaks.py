"""A client's headers reach an upstream only where deliberately mapped (``gateway/dialects/headers.py``):
every streaming ingress dialect to every upstream kind, sending a hostile header set besides its own,
and SGP clients' ``inference_extra_headers``. The fake upstream records what it got."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import KEY, STREAMING, Ingress

BETAS = "claude-code-20250219,prompt-caching-2024-07-31"  # honoured on every target: never refused
# Every value holds "hostile": none may reach an upstream, in a header or in a body
HOSTILE = {
    "anthropic-beta": BETAS,  # an Anthropic client's betas: to Anthropic's wire only
    "anthropic-version": "2023-06-01",
    "OpenAI-Beta": "assistants=v2,hostile",
    "OpenAI-Project": "proj_hostile",
    "x-stainless-lang": "hostile",
    "X-Stainless-Retry-Count": "hostile-0",
    "x-fern-sdk-version": "hostile",
    "Cookie": "session=hostile",
    "Proxy-Authorization": "Basic hostile",
    "api-key": "hostile-key",
    "x-custom-route": "hostile",
}
SGP = next(i for i in STREAMING if i.name == "sgp")
PASSING = {"x-route-hint": "passed"}  # a pass-through header of SGP's: to the targets declaring them


def leaks(got: fake.RecordedRequest) -> list[str]:
    """What of the client's, besides a mapped header, the upstream got: a hostile value, the client's
    key, or another vendor's protocol header."""
    found = [f"{k}: {v}" for k, v in got.headers.items() if "hostile" in v.lower() or KEY in v]
    found += [k for k in got.headers if k.startswith(("openai-beta", "x-stainless-", "x-fern-", "openai-project"))]
    raw = got.raw.decode(errors="replace")
    return found + [w for w in ("hostile", KEY, BETAS) if w in raw]


@pytest.mark.parametrize("kind", fake.KINDS)
@pytest.mark.parametrize("ingress", STREAMING, ids=lambda i: i.name)
async def test_no_client_header_reaches_an_upstream_unmapped(
    gateway: GatewayFactory, upstream: Any, ingress: Ingress, kind: str
) -> None:
    server = await upstream(kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind)]}]))
    path, headers, body = ingress.request("m", "Say something", False, max_tokens=4)
    async with gw.session.post(gw.url + path, json=body, headers={**HOSTILE, **headers}) as resp:
        assert resp.status == 200, await resp.text()
    got = server.requests[-1]
    assert leaks(got) == [], got.headers
    anthropic_path = kind == "anthropic" or got.path.endswith("/messages")  # vLLM's own /v1/messages too
    assert got.headers.get("anthropic-beta") == (BETAS if anthropic_path and ingress.name == "anthropic" else None)
    assert ("anthropic-version" in got.headers) is anthropic_path  # the gateway's own, on Anthropic's path


@pytest.mark.parametrize("kind", ["openai", "sgp-v4"])
async def test_an_sgp_clients_pass_through_headers_go_where_declared(
    gateway: GatewayFactory, upstream: Any, kind: str
) -> None:
    server = await upstream(kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind)]}]))
    path, headers, body = SGP.request("m", "Say something", False, inference_extra_headers=PASSING)
    async with gw.session.post(gw.url + path, json=body, headers={**HOSTILE, **headers}) as resp:
        assert resp.status == 200, await resp.text()
    got = server.requests[-1]
    assert leaks(got) == []
    if kind == "openai":  # as a header of the call, beside the gateway's own
        assert got.headers["x-route-hint"] == "passed" and got.headers["authorization"] == "Bearer upstream-key"
    else:  # SGP's own field, which SGP passes on to the model's provider
        assert got.body["inference_extra_headers"] == PASSING and "x-route-hint" not in got.headers


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("Authorization", "Bearer hostile", "the gateway sets it"),
        ("OpenAI-Organization", "org-hostile", "the gateway sets it"),
        ("x-selected-account-id", "hostile", "the gateway sets it"),
        ("X-Request-Id", "hostile", "the gateway sets it"),
        ("Content-Type", "text/plain", "the gateway sets it"),
        ("anthropic-beta", "context-1m-2025-08-07", "a vendor's protocol header"),
        ("openai-beta", "assistants=v2", "a vendor's protocol header"),
        ("X-Stainless-Lang", "python", "a vendor's protocol header"),
        ("x-route-hint", "a\r\nx-injected: 1", "its value holds a control character"),
        ("bad name", "v", "not a header name"),
    ],
)
async def test_a_reserved_pass_through_header_is_refused_by_name(
    gateway: GatewayFactory, upstream: Any, name: str, value: str, why: str
) -> None:
    server = await upstream("sgp-v4")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "sgp-v4")]}]))
    path, headers, body = SGP.request("m", "Say something", False, inference_extra_headers={name: value})
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        status, error = resp.status, json.loads(await resp.read())
    assert status == 422 and server.requests == [], error  # SGP's status for a body it refuses
    assert f"may not set {name!r} ({why})" in json.dumps(error), error

"""Client mistakes get a clear 4xx in the client's own dialect, naming the field; never a 5xx."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BEARER, BY_NAME, INGRESSES, KEY, Ingress


@pytest.fixture
async def gw(gateway: GatewayFactory, upstream: Any) -> Any:
    server = await upstream("openai")
    cfg = config(
        [
            {"name": "m", "targets": [target(server, "openai")]},
            {"name": "local", "aliases": ["meta/local"], "targets": [target(server, "vllm", adapters={"lora1": "x"})]},
        ]
    )
    return await gateway(cfg)


async def post(gw: Any, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
    data = body if isinstance(body, bytes) else None
    async with gw.session.post(gw.url + path, json=None if data else body, data=data, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None), dict(resp.headers)


def creds(ingress: Ingress, key: str) -> dict[str, str]:
    return {k: (v.replace(KEY, key)) for k, v in ingress.headers.items()}


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_bad_key_is_401(gw: Any, ingress: Ingress) -> None:
    path, _, body = ingress.request("m", "x", False)
    status, reply, headers = await post(gw, path, creds(ingress, "wrong"), body)
    assert status == 401 and "X-Request-ID" in headers
    assert "wrong" not in str(reply)


@pytest.mark.parametrize("ingress", [i for i in INGRESSES if i.name != "octoai"], ids=lambda i: i.name)
async def test_wrong_team_is_403(gw: Any, ingress: Ingress) -> None:
    path, headers, body = ingress.request("m", "x", False)
    team_header = {"openai": "OpenAI-Organization", "sgp": "x-selected-account-id", "sgp5": "x-selected-account-id"}
    headers[team_header.get(ingress.name, "X-Friendli-Team")] = "team2"
    status, _, _ = await post(gw, path, headers, body)
    assert status == 403


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_malformed_bodies_are_4xx_naming_the_field(gw: Any, ingress: Ingress) -> None:
    path, headers, body = ingress.request("m", "x", False, max_tokens="many")
    status, reply, _ = await post(gw, path, headers, body)
    assert status in (400, 422) and "max_tokens" in str(reply)
    status, reply, _ = await post(gw, path, headers, b"{not json")
    assert 400 <= status < 500 and "JSON" in str(reply)
    status, reply, _ = await post(gw, path, headers, b"[1, 2]")
    assert 400 <= status < 500


# What tells an SDK on the shared /v1 paths apart without its body (octoai 1.11's Fern header,
# octoai-sdk 0.10's user agent, friendli-client's team header), and how its error envelope reads.
SHARED_PATH_SDKS = {
    "octoai": ({"X-Fern-SDK-Name": "octoai"}, lambda reply: reply["object"] == "error" and reply["message"]),
    "octoai-sdk": ({"User-Agent": "octoai-0.10.1"}, lambda reply: reply["object"] == "error" and reply["message"]),
    "friendli-client": ({"X-Friendli-Team": "team1"}, lambda reply: reply["message"] == reply["error"]["message"]),
}


@pytest.mark.parametrize("sdk", SHARED_PATH_SDKS)
async def test_an_unreadable_body_is_refused_in_the_envelope_its_headers_name(gw: Any, sdk: str) -> None:
    """A body that is no JSON object leaves only the headers to tell the SDK by: its refusal still
    comes in that SDK's envelope, not OpenAI's (found probing OctoAI's error shapes)."""
    extra, reads_it = SHARED_PATH_SDKS[sdk]
    headers = {**BEARER, "Content-Type": "application/json", **extra}
    for body in (b"{not json", b"[1, 2]", b'{"model": "m", "prompt": "\xff"'):
        status, reply, _ = await post(gw, "/v1/completions", headers, body)
        assert status == 400 and reads_it(reply), (body, reply)


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_unknown_model_is_404(gw: Any, ingress: Ingress) -> None:
    path, headers, body = ingress.request("nope", "x", False)
    status, reply, _ = await post(gw, path, headers, body)
    assert status == 404 and "nope" in str(reply)


async def test_unsupported_feature_names_field_and_target(gw: Any) -> None:
    ingress = BY_NAME["friendli"]
    path, headers, body = ingress.request("m", "x", False, top_k=5)
    status, reply, _ = await post(gw, path, headers, body)
    assert status == 400
    assert reply["error"]["param"] == "top_k" and "openai:up-model" in reply["message"]
    path, headers, body = ingress.request("local", "x", False, top_k=5)
    assert (await post(gw, path, headers, body))[0] == 200


async def test_token_ids_are_asked_only_of_targets_that_return_them(gateway: GatewayFactory, upstream: Any) -> None:
    """vLLM's ``return_token_ids``: OpenAI's API refuses the field, so an OpenAI target refuses it here,
    by name, instead of forwarding it; a vLLM target is asked for the ids."""
    server = await upstream("openai")
    models = [{"name": "m", "targets": [target(server, "openai")]}, {"name": "v", "targets": [target(server, "vllm")]}]
    gw = await gateway(config(models))
    ingress = BY_NAME["openai"]
    path, headers, body = ingress.request("m", "x", False, return_token_ids=True)
    status, reply, _ = await post(gw, path, headers, body)
    assert status == 400 and reply["error"]["param"] == "return_token_ids", reply
    assert server.requests == []
    path, headers, body = ingress.request("v", "x", False, return_token_ids=True)
    status, reply, _ = await post(gw, path, headers, body)
    assert status == 200 and server.requests[-1].body["return_token_ids"] is True, reply


async def test_vendor_model_names_and_adapters_resolve(gw: Any) -> None:
    sgp = BY_NAME["sgp"]
    for model, expected in (("meta/local", 200), ("meta/local/lora1", 200), ("meta/local/other", 422), ("x/m", 200)):
        path, headers, body = sgp.request(model, "x", False)
        status, reply, _ = await post(gw, path, headers, body)
        assert status == expected, (model, reply)


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_a_deployment_no_target_serves_is_refused_naming_the_model(gw: Any, ingress: Ingress) -> None:
    """SGP's ``vendor/model/deployment`` on a target without adapters: the refusal names the field the
    client sent, ``model``, not the gateway's own word for it (it said 'adapter')."""
    path, headers, body = ingress.request("x/m/dep", "x", False)
    status, reply, _ = await post(gw, path, headers, body)
    assert status == 400 and "'model'" in str(reply) and "'dep'" in str(reply), reply
    assert "'adapter'" not in str(reply), reply


async def test_request_id_is_echoed(gw: Any) -> None:
    path, headers, body = BY_NAME["openai"].request("m", "x", False)
    status, _, out = await post(gw, path, {**headers, "X-Request-Id": "abc-123"}, body)
    assert status == 200 and out["X-Request-ID"] == "abc-123"


async def test_models_health_ready(gw: Any) -> None:
    async with gw.session.get(gw.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}) as resp:
        data = await resp.json()
    assert {m["id"] for m in data["data"]} >= {"m", "local", "meta/local"}
    async with gw.session.get(gw.url + "/v1/models") as resp:
        assert resp.status == 401
    async with gw.session.get(gw.url + "/health") as resp:
        assert resp.status == 200
    async with gw.session.get(gw.url + "/ready") as resp:
        ready = await resp.json()
    assert resp.status == 200 and ready["ready"] and ready["models"] == {"m": True, "local": True, "meta/local": True}

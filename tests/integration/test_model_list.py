"""The model list and one model (``GET {base}/models[/{model_id}]``) on every base a vendor SDK lists
models under, over real sockets: OpenAI's shape, or Anthropic's with ``anthropic-version``; ids with a
``/`` (configured names, a vendor's models under its prefix), sent as is or as ``%2F``; only what the
key's team may use; Anthropic's cursor pages; every refusal in the client's envelope."""

from __future__ import annotations

from typing import Any

import pytest
from yarl import URL

from gateway.runtime.config import GatewayConfig, hash_key, parse_config
from gateway.web.routes import MODEL_LIST_PATHS
from tests.integration.conftest import UPSTREAM_KEY_ENV, Gateway, GatewayFactory, target
from tests.integration.dialect_clients import KEY

JSON = Any
NARROW_KEY = "gw-narrow-0123456789"  # team3's: it may use ``m`` alone
OPENAI = {"Authorization": f"Bearer {KEY}"}
ANTHROPIC = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
MANY = [f"bulk-{i:02d}" for i in range(45)]


def gateway_config(server: Any, vendor: Any, extra: list[str]) -> GatewayConfig:
    up = target(server, "vllm")
    models = [{"name": n, "targets": [up]} for n in ("m", "meta/llama", *extra)]
    teams = [
        {"id": "team1", "keys": [{"id": "k1", "sha256": hash_key(KEY)}]},
        {"id": "team3", "keys": [{"id": "k3", "sha256": hash_key(NARROW_KEY)}], "models": ["m"]},
    ]
    vendors = {"openai": {"provider": "openai", "base_url": vendor.url, "api_key_env": UPSTREAM_KEY_ENV}}
    return parse_config({"models": models, "teams": teams, "vendors": vendors})


async def get(gw: Gateway, path: str, headers: dict[str, str]) -> tuple[int, JSON]:
    async with gw.session.get(URL(gw.url.rstrip("/") + path, encoded=True), headers=headers) as resp:
        return resp.status, await resp.json()


@pytest.fixture
async def gw(gateway: GatewayFactory, upstream: Any) -> Gateway:
    server = await upstream("vllm", models=("up-model",))
    vendor = await upstream("openai", models=("gpt-4o-mini",))
    return await gateway(gateway_config(server, vendor, MANY))


@pytest.mark.parametrize("base", MODEL_LIST_PATHS)
@pytest.mark.parametrize("model_id", ["m", "meta/llama", "meta%2Fllama", "openai/gpt-4o-mini", "openai%2Fgpt-4o-mini"])
async def test_one_model_on_every_base(gw: Gateway, base: str, model_id: str) -> None:
    name = model_id.replace("%2F", "/")
    status, got = await get(gw, f"{base}/{model_id}", OPENAI)
    assert status == 200, got
    assert got == {"id": name, "object": "model", "created": got["created"], "owned_by": "llm-gateway"}
    assert isinstance(got["created"], int)
    status, got = await get(gw, f"{base}/{model_id}", ANTHROPIC)
    assert status == 200, got
    card = {"type": "model", "id": name, "display_name": name, "created_at": got["created_at"], "lifecycle": "active"}
    assert got == card
    assert got["created_at"].endswith("Z")


@pytest.mark.parametrize("model_id", ["nope", "openai/nope", "meta", "m/extra"])
async def test_an_unknown_model_is_a_404_in_the_clients_envelope(gw: Gateway, model_id: str) -> None:
    status, got = await get(gw, f"/v1/models/{model_id}", OPENAI)
    assert status == 404
    assert got["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",  # OpenAI's answer for an unknown model
        "code": "model_not_found",
        "param": "model",
    }
    assert repr(model_id) in got["error"]["message"]
    status, got = await get(gw, f"/v1/models/{model_id}", ANTHROPIC)
    assert status == 404 and got["type"] == "error" and got["error"]["type"] == "not_found_error"


async def test_a_team_sees_only_its_models(gw: Gateway) -> None:
    narrow = {"Authorization": f"Bearer {NARROW_KEY}"}
    status, got = await get(gw, "/v1/models", narrow)
    assert status == 200 and [m["id"] for m in got["data"]] == ["m"]
    status, got = await get(gw, "/v1/models", {"x-api-key": NARROW_KEY, "anthropic-version": "2023-06-01"})
    assert [m["id"] for m in got["data"]] == ["m"] and got["has_more"] is False
    assert (await get(gw, "/v1/models/m", narrow))[0] == 200
    for hidden in ("meta/llama", "openai/gpt-4o-mini", "bulk-00"):
        status, got = await get(gw, f"/v1/models/{hidden}", narrow)
        assert status == 404 and got["error"]["code"] == "model_not_found", hidden  # as if it did not exist
    status, got = await get(gw, "/v1/models", OPENAI)
    assert {"m", "meta/llama", "openai/gpt-4o-mini", *MANY} == {m["id"] for m in got["data"]}


@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/m"])
async def test_a_bad_key_is_refused(gw: Gateway, path: str) -> None:
    status, got = await get(gw, path, {"Authorization": "Bearer gw-wrong"})
    assert status == 401 and got["error"]["type"] == "authentication_error"
    status, got = await get(gw, path, {**ANTHROPIC, "x-api-key": "gw-wrong"})
    assert status == 401 and got["error"]["type"] == "authentication_error"


async def test_anthropic_pages_over_http(gw: Gateway) -> None:
    status, whole = await get(gw, "/v1/models?limit=1000", ANTHROPIC)
    assert status == 200 and whole["has_more"] is False
    names = [m["id"] for m in whole["data"]]
    assert len(names) == 48 and names[:2] == ["bulk-00", "bulk-01"]
    status, first = await get(gw, "/v1/models", ANTHROPIC)
    assert [m["id"] for m in first["data"]] == names[:20] and first["has_more"] is True  # 20 by default
    seen, query = [], "limit=7"
    while True:
        status, got = await get(gw, f"/v1/models?{query}", ANTHROPIC)
        assert status == 200, got
        seen += [m["id"] for m in got["data"]]
        if not got["has_more"]:
            break
        query = f"limit=7&after_id={got['last_id'].replace('/', '%2F')}"
    assert seen == names
    status, got = await get(gw, f"/v1/models?limit=3&before_id={names[10]}", ANTHROPIC)
    assert [m["id"] for m in got["data"]] == names[7:10] and got["has_more"] is True


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"), ("after_id=nope", "after_id")],
)
async def test_anthropic_bad_query_values(gw: Gateway, query: str, param: str) -> None:
    status, got = await get(gw, f"/v1/models?{query}", ANTHROPIC)
    assert status == 400 and got["error"]["type"] == "invalid_request_error"
    assert got["error"]["message"].startswith(f"{param}: ")


@pytest.mark.parametrize("base", MODEL_LIST_PATHS)
@pytest.mark.parametrize("headers", [OPENAI, {"x-api-key": KEY}], ids=["bearer", "x-api-key"])
async def test_either_key_header_lists_on_every_base(gw: Gateway, base: str, headers: dict[str, str]) -> None:
    """The list is every dialect's: an SGP client sends its key as ``x-api-key`` (on ``/v5`` too), an
    OpenAI one as a bearer token."""
    status, got = await get(gw, base, headers)
    assert status == 200 and "m" in [m["id"] for m in got["data"]], got
    status, got = await get(gw, f"{base}/m", headers)
    assert status == 200 and got["id"] == "m", got


@pytest.mark.parametrize("base", MODEL_LIST_PATHS)
async def test_a_refusal_by_either_key_header_is_in_the_lists_shape(gw: Gateway, base: str) -> None:
    """The list is OpenAI's shape on every base, and so are its refusals, whichever key header came."""
    status, got = await get(gw, f"{base}/nope", {"x-api-key": KEY})
    assert status == 404 and got["error"]["code"] == "model_not_found" and got["error"]["param"] == "model", got
    status, got = await get(gw, base, {"x-api-key": "wrong"})
    assert status == 401 and got["error"]["type"] == "authentication_error", got

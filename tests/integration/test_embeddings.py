"""POST /v1/embeddings over real sockets: every input shape, base64 and dimensions, to OpenAI and vLLM
targets; a model's kind (a named 400 for the other kind); providers without embeddings refusing by
name; input tokens against tpm."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from tests.fakes import scripted
from tests.integration.conftest import GatewayFactory, config
from tests.integration.test_responses import post, scripted_upstream

JSON = Any


async def embed(gw: Any, body: JSON) -> tuple[int, JSON]:
    return await post(gw, body, "/v1/embeddings")


def model(server: Any, provider: str = "openai", kind: str = "embedding", name: str = "e") -> dict[str, JSON]:
    url = str(server.make_url("/v1"))
    target = {"provider": provider, "base_url": url, "model": "up-embed", "api_key_env": "TEST_UPSTREAM_KEY"}
    return {"name": name, "kind": kind, "targets": [target]}


@pytest.mark.parametrize("provider", ["openai", "vllm"])
@pytest.mark.parametrize(
    "given",
    ["one text", ["first text", "second one"], [1, 2, 3], [[1, 2], [3, 4, 5]]],
    ids=["string", "strings", "token-ids", "token-id-lists"],
)
async def test_input_shapes(gateway: GatewayFactory, provider: str, given: JSON) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([model(server, provider)]))
        status, body = await embed(gw, {"model": "e", "input": given})
        assert status == 200, body
        items = [given] if isinstance(given, str) or isinstance(given[0], int) else given
        assert body["object"] == "list" and body["model"] == "up-embed"
        assert [d["embedding"] for d in body["data"]] == [scripted.vector(x, 8) for x in items]
        assert [d["index"] for d in body["data"]] == list(range(len(items)))
        sent = server.app[scripted.REQUESTS][-1]
        assert sent["input"] == given and sent["model"] == "up-embed" and sent["encoding_format"] == "float"
        tokens = sum(len(x.split()) if isinstance(x, str) else len(x) for x in items)
        assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


async def test_base64_dimensions_and_user(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([model(server)]))
        body = {"model": "e", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 4, "user": "u1"}
        status, answer = await embed(gw, body)
        assert status == 200, answer
        for item, text in zip(answer["data"], ["a", "b"], strict=True):
            raw = base64.b64decode(item["embedding"])
            floats = struct.unpack(f"<{len(raw) // 4}f", raw)
            assert floats == pytest.approx(scripted.vector(text, 4), rel=1e-6)
        sent = server.app[scripted.REQUESTS][-1]
        assert sent["dimensions"] == 4 and sent["user"] == "u1" and sent["encoding_format"] == "float"


async def test_kind_mismatch_is_a_named_400(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([model(server), model(server, kind="chat", name="c")]))
        status, err = await post(
            gw, {"model": "e", "messages": [{"role": "user", "content": "x"}]}, "/v1/chat/completions"
        )
        assert status == 400 and err["error"]["param"] == "model" and "embedding model" in err["error"]["message"]
        status, err = await post(gw, {"model": "e", "input": "x"}, "/v1/responses")
        assert status == 400 and err["error"]["param"] == "model"
        status, err = await post(gw, {"model": "c", "input": "x"}, "/v1/embeddings")
        assert status == 400 and err["error"]["param"] == "model" and "chat model" in err["error"]["message"]
        assert server.app[scripted.REQUESTS] == []


async def test_a_provider_without_embeddings_refuses_by_name(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([model(server, "friendli")]))
        status, err = await embed(gw, {"model": "e", "input": "x"})
        assert status == 400, err
        assert err["error"]["param"] == "input" and "friendli" in err["error"]["message"]


async def test_input_tokens_count_against_tpm(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        cfg = config([model(server)])
        team = cfg.teams[0].model_copy(update={"limits": cfg.teams[0].limits.model_copy(update={"tpm": 50})})
        gw = await gateway(cfg.model_copy(update={"teams": (team, *cfg.teams[1:])}))
        status, _ = await embed(gw, {"model": "e", "input": "short"})
        assert status == 200
        status, err = await embed(gw, {"model": "e", "input": "word " * 200})  # about 250 tokens estimated
        assert status == 429 and "tokens per minute" in err["error"]["message"], err


@pytest.mark.parametrize(
    ("given", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": [1, "x"]}, "input"),
        ({"input": [-1]}, "input"),
        ({"encoding_format": "int8"}, "encoding_format"),
        ({"dimensions": 0}, "dimensions"),
        ({"stream": True}, "stream"),
    ],
)
async def test_bad_bodies_are_named(gateway: GatewayFactory, given: JSON, param: str) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([model(server)]))
        status, err = await embed(gw, {"model": "e", "input": "x", **given})
        assert status == 400, err
        assert (err["error"]["param"] or "").startswith(param), err

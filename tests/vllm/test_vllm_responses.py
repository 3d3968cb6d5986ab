"""The gateway's Responses and embeddings in front of the real vLLM engine (CPU): a Responses request,
whole and streamed, on vLLM's own /v1/responses (answered as vLLM answers it directly), a chain
rebuilt by the gateway for the stateless replica, what only OpenAI serves refused by name before the
replica is asked; an embeddings request to the tiny model served as an embedding model
(``--runner pooling --convert embed``), the vectors as vLLM computes them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from tests.vllm.conftest import VLLM, running_vllm
from tests.vllm.served import served, tier_config
from tests.vllm.server import DEFAULT_ARGS

pytestmark = pytest.mark.vllm
KEY = "gw-vllm-responses-key"
BEARER = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def vllm_embedder(tmp_path_factory: pytest.TempPathFactory, vllm_server: VLLM) -> Iterator[VLLM]:
    """The tiny model as an embedding model: vLLM pools its last hidden state."""
    log = tmp_path_factory.mktemp("vllm-embed") / "vllm.log"
    with running_vllm(log, extra=(*DEFAULT_ARGS, "--runner", "pooling", "--convert", "embed")) as server:
        yield server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with session.post(url, json=body, headers=BEARER) as resp:
        raw = await resp.read()
        if resp.content_type == "text/event-stream":
            return resp.status, [json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: ")]
        return resp.status, json.loads(raw)


async def test_responses_on_real_vllm(vllm_server: VLLM, session: aiohttp.ClientSession) -> None:
    async with served(
        tier_config([{"name": "tiny", "targets": [{"provider": "vllm", "base_url": vllm_server.url}]}], KEY)
    ) as url:
        body = {"model": "tiny", "temperature": 0, "input": "the quick brown fox", "max_output_tokens": 8}
        # vLLM's own /v1/responses (its answer differs from its chat's for the same words: its Responses
        # path renders and samples on its own), which the gateway's answer must equal
        async with session.post(vllm_server.url + "/responses", json={**body, "model": vllm_server.model}) as resp:
            assert resp.status == 200, await resp.text()
            direct = await resp.json()
        status, whole = await post(session, url + "/v1/responses", body)
        assert status == 200, whole
        text = "".join(p["text"] for item in whole["output"] if item["type"] == "message" for p in item["content"])
        own = "".join(p["text"] for item in direct["output"] if item["type"] == "message" for p in item["content"])
        assert text == own and whole["usage"] == direct["usage"]
        status, events = await post(session, url + "/v1/responses", {**body, "stream": True})
        assert status == 200, events
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        assert "".join(deltas) == text and len(deltas) > 1  # the engine's tokens as they came
        assert events[-1]["type"] in ("response.completed", "response.incomplete")
        assert [e["sequence_number"] for e in events] == list(range(len(events)))


async def test_embeddings_on_real_vllm(vllm_embedder: VLLM, session: aiohttp.ClientSession) -> None:
    target = {"provider": "vllm", "base_url": vllm_embedder.url, "model": vllm_embedder.model}
    async with served(tier_config([{"name": "embed", "kind": "embedding", "targets": [target]}], KEY)) as url:
        texts = ["the quick brown fox", "jumps over"]
        status, answer = await post(session, url + "/v1/embeddings", {"model": "embed", "input": texts})
        assert status == 200, answer
        direct = {"model": vllm_embedder.model, "input": texts}
        async with session.post(vllm_embedder.url + "/embeddings", json=direct) as resp:
            assert resp.status == 200, await resp.text()
            own = await resp.json()
        assert len(answer["data"]) == len(own["data"]) == 2
        for mine, theirs in zip(answer["data"], own["data"], strict=True):
            assert mine["embedding"] == pytest.approx(theirs["embedding"], rel=1e-5, abs=1e-6)
        assert answer["usage"]["prompt_tokens"] == own["usage"]["prompt_tokens"] > 0
        status, ids = await post(session, url + "/v1/embeddings", {"model": "embed", "input": [[1, 2, 3]]})
        assert status == 200 and len(ids["data"][0]["embedding"]) == len(answer["data"][0]["embedding"]), ids


async def test_responses_go_to_vllms_own_route_and_chain_through_the_gateway(
    vllm_server: VLLM, session: aiohttp.ClientSession
) -> None:
    async with served(
        tier_config([{"name": "tiny", "targets": [{"provider": "vllm", "base_url": vllm_server.url}]}], KEY)
    ) as url:
        body = {"model": "tiny", "temperature": 0, "input": "the quick brown fox", "max_output_tokens": 8}
        status, whole = await post(session, url + "/v1/responses", body)
        assert status == 200, whole
        async with session.post(vllm_server.url + "/responses", json={**body, "model": vllm_server.model}) as resp:
            assert resp.status == 200, await resp.text()
            direct = await resp.json()
        # vLLM's own response object, not the gateway's rendering of a chat answer
        assert set(whole) == set(direct) and whole["output"][-1]["content"] == direct["output"][-1]["content"]
        assert whole["usage"] == direct["usage"]
        # a second turn: the chain rebuilt from the gateway's store (vLLM keeps none)
        status, second = await post(
            session, url + "/v1/responses", {**body, "input": "and then", "previous_response_id": whole["id"]}
        )
        assert status == 200, second
        assert second["usage"]["input_tokens"] > whole["usage"]["input_tokens"] + whole["usage"]["output_tokens"]
        async with session.get(url + f"/v1/responses/{second['id']}", headers=BEARER) as resp:
            assert resp.status == 200 and (await resp.json())["id"] == second["id"]
        status, err = await post(session, url + "/v1/responses", {**body, "tools": [{"type": "web_search"}]})
        assert status == 400 and err["error"]["param"].startswith("tools[0].type"), err

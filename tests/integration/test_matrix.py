"""The translation matrix: every ingress dialect by every upstream kind, streaming and not, over real
sockets. Text, finish reason, usage and framing are checked in every cell, and the upstream is checked
to have received its own vendor's wire format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BY_NAME, INGRESSES, Ingress, body_of, frames

PROMPT = "Say something deterministic"
KINDS = list(fake.KINDS)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_cell(gateway: GatewayFactory, upstream: Any, ingress: Ingress, kind: str, stream: bool) -> None:
    server = await upstream(kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind)]}]))
    answer = await gw.send(ingress, "m", PROMPT, stream)
    assert answer.status == 200, answer.raw
    sent = server.requests[-1].body
    words = fake.tokenize(fake.expected(PROMPT, 4, seed=sent.get("seed")))
    assert answer.text == "".join(words)
    assert answer.finish == "length"
    assert answer.usage["completion_tokens"] == 4
    assert answer.usage["total_tokens"] == answer.usage["prompt_tokens"] + 4
    if stream:
        assert answer.done == ingress.done, answer.raw[-80:]
    assert sent["model"] == "up-model" and sent["max_tokens"] == 4
    assert not any(k.startswith("guided_") for k in sent)
    if kind.startswith("sgp") or kind == "anthropic":
        assert server.requests[-1].headers["x-api-key"] == "upstream-key"
        assert kind != "anthropic" or server.requests[-1].headers["anthropic-version"] == "2023-06-01"
    else:
        assert server.requests[-1].headers["authorization"] == "Bearer upstream-key"
    assert all(KEY_FRAGMENT not in v for v in server.requests[-1].headers.values())
    if kind == "anthropic":  # Anthropic takes no seed: a drawn one is taken off (tests/unit/test_seeds.py)
        assert "seed" not in sent, sent
    elif ingress.name.startswith("friendli") and (not stream or ingress.name == "friendli2024"):
        # Friendli reports the seed used; the client gave none, so the gateway drew one and sent it
        # (every other kind here takes a seed)
        assert isinstance(sent.get("seed"), int), sent
    elif ingress.name == "friendli":  # today's stream chunks report no seed: none is drawn for them
        assert "seed" not in sent, sent
    if ingress.name.startswith("friendli") and not stream:
        choice = answer.body["choices"][0]
        assert isinstance(choice["seed"], int)
        if "seed" in sent:
            assert choice["seed"] == sent["seed"]
        if kind.startswith("friendli"):
            assert choice["tokens"] == [fake.token_id(w) for w in words]


KEY_FRAGMENT = "gw-key"


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_upstream_rejection_keeps_status(gateway: GatewayFactory, upstream: Any, ingress: Ingress) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    answer = await gw.send(ingress, "m", "x [[fault:status=400]]", False)
    expected = 400
    assert answer.status == expected, answer.raw
    assert b"injected 400" in answer.raw


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_upstream_failure_is_502_in_dialect(gateway: GatewayFactory, upstream: Any, ingress: Ingress) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    answer = await gw.send(ingress, "m", "x [[fault:status=500]]", False)
    assert answer.status == 502, answer.raw
    body = answer.body
    if ingress.name == "openai":
        assert body["error"]["code"] == "upstream_failed"
    elif ingress.name.startswith("sgp"):
        assert "detail" in body
    elif ingress.name == "octoai":
        assert body["object"] == "error" and body["message"]
    else:
        assert body["message"] and body["error"]["message"]


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_cut_stream_ends_with_in_band_error(gateway: GatewayFactory, upstream: Any, ingress: Ingress) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    path, headers, body = ingress.request("m", "x [[fault:reset_after=2,hang_between=0.05]]", True)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
        raw, _ = await body_of(resp)
    assert b"[DONE]" not in raw
    assert b"broke off" in raw or b"ended the stream early" in raw, raw[-300:]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_seed_per_choice_fans_out(gateway: GatewayFactory, upstream: Any, stream: bool) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    fr = next(i for i in INGRESSES if i.name == "friendli")
    path, headers, body = fr.request("m", PROMPT, stream, seed=[11, 22, 33])
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
        raw = await resp.read()
    assert sorted(r.body["seed"] for r in server.requests) == [11, 22, 33]
    assert all("n" not in r.body for r in server.requests)
    if stream:
        chunks = [json.loads(d) for d in frames(raw) if d != "[DONE]"]
        indices = {ch["index"] for c in chunks for ch in c["choices"]}
        usage = next(c["usage"] for c in chunks if c.get("usage"))
        assert indices == {0, 1, 2} and usage["completion_tokens"] == 12
    else:
        answer = json.loads(raw)
        assert [(c["index"], c["seed"]) for c in answer["choices"]] == [(0, 11), (1, 22), (2, 33)]
        assert answer["usage"]["completion_tokens"] == 12


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("seed", [5, None], ids=["given", "drawn"])
async def test_one_seed_for_n_choices_reports_each_choices_own(
    gateway: GatewayFactory, upstream: Any, stream: bool, seed: int | None
) -> None:
    """vLLM samples choice j of n with ``seed + j`` (v1/engine/parallel_sampling.py): a Friendli
    client is told that seed per choice, the one that reproduces it, not the request's for all."""
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    path, headers, body = BY_NAME["friendli2024"].request("m", PROMPT, stream, n=3, seed=seed)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
        raw = await resp.read()
    (sent,) = server.requests
    first = sent.body["seed"]
    assert seed is None or first == seed
    complete = json.loads(frames(raw)[-2] if stream else raw)  # the stream's last line before [DONE]
    assert [(c["index"], c["seed"]) for c in complete["choices"]] == [(j, first + j) for j in range(3)]

"""``POST /v1/messages/count_tokens`` over real sockets: exact where the target can count (an ``anthropic``
target's own count_tokens, passed through or translated; a ``vllm`` target's /tokenize, one server or a
replica pool), equal to the prompt tokens the same body's message reports; the admission bound for
every other target and whenever the target's count fails (refused, down), never a 5xx."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.request import Operation
from gateway.dialects import ANTHROPIC
from gateway.limits.plan import estimate_prompt
from tests.fakes import upstream as fake
from tests.integration.conftest import Gateway, GatewayFactory, config, target
from tests.integration.test_anthropic_ingress import HEADERS, WEATHER, post
from tests.support.redis_servers import free_port

JSON = Any
PATH = "/v1/messages/count_tokens"
UPSTREAM_KEY = "upstream-key"  # conftest's UPSTREAM_KEY_ENV holds it
LONG = "Tell me a long story about the quick brown fox and the lazy dog, " * 20


def asked(**fields: JSON) -> JSON:
    return {
        "model": "m",
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": LONG},
            {"role": "assistant", "content": "Once"},
            {"role": "user", "content": [{"type": "text", "text": "go on"}]},
        ],
        **fields,
    }


def bound(body: JSON) -> int:
    return estimate_prompt(ANTHROPIC.parse(Operation.CHAT, body, "count_tokens"))


async def count(gw: Gateway, body: JSON) -> int:
    status, _, raw = await post(gw, body, path=PATH)
    assert status == 200, raw
    got = json.loads(raw)
    assert set(got) == {"input_tokens"} and isinstance(got["input_tokens"], int)
    return int(got["input_tokens"])


async def prompt_tokens(gw: Gateway, body: JSON) -> int:
    """What a message with the same body reports as its prompt (cache reads and writes included)."""
    status, _, raw = await post(gw, body | {"max_tokens": 4})
    assert status == 200, raw
    usage = json.loads(raw)["usage"]
    return int(usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"])


@pytest.mark.parametrize("passthrough", [True, False], ids=["passthrough", "translated"])
async def test_an_anthropic_target_counts(gateway: GatewayFactory, upstream: Any, passthrough: bool) -> None:
    server = await upstream("anthropic", models=("up-model",), api_key=UPSTREAM_KEY)
    gw = await gateway(config([{"name": "m", "targets": [target(server, "anthropic", passthrough=passthrough)]}]))
    for body in (asked(), asked(tools=[WEATHER], tool_choice={"type": "auto"})):
        got = await count(gw, body)
        assert got == await prompt_tokens(gw, body) and got < bound(body) / 2
    sent = [r for r in server.requests if r.path == "/v1/messages/count_tokens"]
    assert len(sent) == 2
    for r in sent:  # as Anthropic's API takes it: the gateway's key and version, no generation fields
        assert r.headers["x-api-key"] == UPSTREAM_KEY and r.headers["anthropic-version"] == "2023-06-01"
        assert r.body["model"] == "up-model" and not {"max_tokens", "stream", "temperature"} & set(r.body)
        assert r.body["system"] in ("Be brief.", [{"type": "text", "text": "Be brief."}])
    assert sent[1].body["tools"][0]["name"] == "get_weather"


async def test_a_count_carries_the_betas(gateway: GatewayFactory, upstream: Any) -> None:
    """As a message does, every one to an Anthropic target; a count on any other target is the gateway's
    own, which no beta changes: answered, not refused (a message with a beta only Anthropic honours is)."""
    claude = await upstream("anthropic", models=("up-model",), api_key=UPSTREAM_KEY)
    vllm = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(claude, "anthropic")]}]))
    other = await gateway(config([{"name": "m", "targets": [target(vllm, "vllm")]}]))
    headers = {**HEADERS, "anthropic-beta": "context-1m-2025-08-07, prompt-caching-2024-07-31"}
    status, _, raw = await post(gw, asked(), headers, PATH)
    assert status == 200, raw
    sent = [r for r in claude.requests if r.path == PATH]
    assert len(sent) == 1 and sent[0].headers["anthropic-beta"] == "context-1m-2025-08-07,prompt-caching-2024-07-31"
    status, _, raw = await post(other, asked(), headers, PATH)
    assert status == 200 and json.loads(raw)["input_tokens"] > 0, raw
    status, _, raw = await post(other, asked(max_tokens=4), headers)
    assert status == 400 and "anthropic-beta context-1m-2025-08-07" in json.loads(raw)["error"]["message"]


async def test_a_vllm_target_counts_with_its_tokenizer(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    got = await count(gw, asked())
    assert got == await prompt_tokens(gw, asked()) and got < bound(asked()) / 2


async def test_a_replica_pool_counts(gateway: GatewayFactory, replicas: list[fake.Upstream]) -> None:
    pool = {"provider": "vllm", "replicas": [r.url for r in replicas], "model": "tiny"}
    gw = await gateway(config([{"name": "m", "targets": [pool]}]))
    got = await count(gw, asked())
    assert got == await prompt_tokens(gw, asked()) and got < bound(asked()) / 2


async def test_other_targets_answer_the_bound(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    assert await count(gw, asked()) == bound(asked())


@pytest.mark.parametrize("marker", ["[[fault:status=500]]", "[[fault:status=429]]", "[[fault:status=400]]"])
async def test_a_failed_count_answers_the_bound(gateway: GatewayFactory, upstream: Any, marker: str) -> None:
    server = await upstream("anthropic", models=("up-model",), api_key=UPSTREAM_KEY)
    gw = await gateway(config([{"name": "m", "targets": [target(server, "anthropic")]}]))
    body = asked(messages=[{"role": "user", "content": f"hello {marker}"}])
    assert await count(gw, body) == bound(body)
    assert [r.path for r in server.requests] == ["/v1/messages/count_tokens"]  # it was asked, and failed


@pytest.mark.parametrize("kind", ["anthropic", "vllm"])
async def test_an_unreachable_target_answers_the_bound(gateway: GatewayFactory, kind: str) -> None:
    dead = {"provider": kind, "base_url": f"http://127.0.0.1:{free_port()}", "model": "up-model"}
    gw = await gateway(config([{"name": "m", "targets": [dead]}]))
    assert await count(gw, asked()) == bound(asked())


async def test_checks_come_first(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("anthropic", models=("up-model",), api_key=UPSTREAM_KEY)
    gw = await gateway(config([{"name": "m", "targets": [target(server, "anthropic")]}]))
    status, _, raw = await post(gw, asked(), {**HEADERS, "x-api-key": "wrong"}, path=PATH)
    assert status == 401 and json.loads(raw)["error"]["type"] == "authentication_error"
    status, _, raw = await post(gw, asked(model="nope"), path=PATH)
    assert status == 404 and json.loads(raw)["error"]["type"] == "not_found_error"
    assert not server.requests  # nothing asked of the target for a refused count

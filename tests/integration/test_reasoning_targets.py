"""An Anthropic client's thinking, effort and earlier turns' thinking through the gateway to every
OpenAI-shaped target kind on the fake upstream: a target with no reasoning control answers without
them (none of their fields reaches it, the drop is counted), an ``openai`` target whose model reasons
(``extra_features: [thinking, effort]``) gets them as ``reasoning_effort``. The fake's OpenAI wire
judges a chat as OpenAI's API does by its model: ``o3`` refuses ``max_tokens`` and efforts beyond
high, ``gpt-4o`` refuses ``reasoning_effort`` (docs/dialects.md, "Thinking and effort on every target").
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import Gateway, GatewayFactory, config, target
from tests.integration.dialect_clients import KEY, frames
from tests.support import eventually

JSON = Any
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
BETAS = {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,effort-2025-11-24"}
THOUGHT = {"type": "thinking", "thinking": "Two and two.", "signature": ""}
TURNS = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": [THOUGHT, {"type": "text", "text": "4"}]},
    {"role": "user", "content": "And 3+3?"},
]
BODY = {"model": "m", "max_tokens": 8, "messages": TURNS, "thinking": {"type": "adaptive"}}
REASONS = ["thinking", "effort", "thoughts"]
# OpenAI-shaped kinds, each with the upstream model its target names: OpenAI's a non-reasoning one
KINDS = [("openai", "gpt-4o"), ("friendli", "up-model"), ("sgp", "up-model"), ("sgp-v4", "up-model")]
KINDS += [("octoai", "up-model")]


async def messages(gw: Gateway, body: JSON) -> tuple[int, bytes]:
    async with gw.session.post(gw.url + "/v1/messages", json=body, headers={**HEADERS, **BETAS}) as resp:
        return resp.status, await resp.read()


def blocks(raw: bytes, stream: bool) -> list[str]:
    """The answer's content block types, whole or streamed."""
    if not stream:
        return [b["type"] for b in json.loads(raw)["content"]]
    starts = (json.loads(d) for d in frames(raw))
    return [e["content_block"]["type"] for e in starts if e["type"] == "content_block_start"]


async def dropped(gw: Gateway, name: str) -> set[str]:
    """The advisory features /metrics counts as dropped by target ``name``."""
    async with gw.session.get(gw.url + "/metrics") as resp:
        text = await resp.text()
    prefix = "gateway_dropped_features_total{"
    lines = [line for line in text.splitlines() if line.startswith(prefix) and f'target="{name}"' in line]
    return {f for f in REASONS if any(f'feature="{f}"' in line for line in lines)}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("kind", "model"), KINDS, ids=[k for k, _ in KINDS])
async def test_a_target_without_reasoning_control_answers_without_it(
    gateway: GatewayFactory, upstream: Any, kind: str, model: str, stream: bool
) -> None:
    server = await upstream(kind)
    name = f"{kind}-plain-{'stream' if stream else 'whole'}"  # its own metric series
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind, model=model, name=name)]}]))
    body = BODY | {"output_config": {"effort": "max"}, "stream": stream}
    status, raw = await messages(gw, body)
    assert status == 200, raw
    assert blocks(raw, stream) == ["text"]
    sent = server.requests[-1].body
    assert not {"thinking", "effort", "output_config", "reasoning_effort", "thinking_token_budget"} & sent.keys()
    assert "Two and two." not in json.dumps(sent), sent  # the earlier turn's thinking stayed here
    assert sent["messages"][1]["content"] == "4"
    await eventually(lambda: counted(gw, name), f"the drops of {name} counted")  # the metrics' batch


async def counted(gw: Gateway, name: str) -> bool:
    return await dropped(gw, name) == set(REASONS)


@pytest.mark.parametrize(
    ("fields", "effort"),
    [
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "medium"}}, "medium"),
        ({"thinking": {"type": "enabled", "budget_tokens": 31999}}, "high"),  # Claude Code's budget
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}, "output_config": {"effort": "low"}}, "low"),
        ({"thinking": {"type": "adaptive"}}, None),  # the model's own default
    ],
)
async def test_a_reasoning_openai_target_takes_them_as_reasoning_effort(
    gateway: GatewayFactory, upstream: Any, fields: JSON, effort: str | None
) -> None:
    server = await upstream("openai")
    reasoner = target(server, "openai", model="o3", extra_features=["thinking", "effort"])
    gw = await gateway(config([{"name": "m", "targets": [reasoner]}]))
    status, raw = await messages(gw, BODY | fields)
    assert status == 200, raw
    sent = server.requests[-1].body
    assert sent.get("reasoning_effort") == effort and sent["max_completion_tokens"] == 8, sent
    assert "max_tokens" not in sent and not {"thinking", "effort", "output_config"} & sent.keys()


async def test_a_level_the_reasoning_model_lacks_is_its_own_refusal(gateway: GatewayFactory, upstream: Any) -> None:
    """Anthropic's ``max`` is OpenAI's deepest, ``xhigh``: o3 has no such level and says so, as it
    would to an OpenAI client asking it (the gateway does not lower what was asked)."""
    server = await upstream("openai")
    reasoner = target(server, "openai", model="o3", extra_features=["thinking", "effort"])
    gw = await gateway(config([{"name": "m", "targets": [reasoner]}]))
    status, raw = await messages(gw, BODY | {"output_config": {"effort": "max"}})
    error = json.loads(raw)["error"]
    assert status == 400 and error["type"] == "invalid_request_error", raw
    assert "'xhigh'" in error["message"] and server.requests[-1].body["reasoning_effort"] == "xhigh"

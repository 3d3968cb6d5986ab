"""Messages requests to a ``vllm`` target: to the replica's own /v1/messages where it serves it (here
the Anthropic fake behind a front that routes /v1/messages to it and the rest to the vLLM fake), else
translated to chat after one 404 for the path, remembered for the target."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakes.front import Front, front
from tests.integration.conftest import Gateway, GatewayFactory, config, target
from tests.integration.dialect_clients import KEY, frames

HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 6}


@pytest.fixture
async def fakes(upstream: Any) -> AsyncIterator[tuple[Any, Any]]:
    yield await upstream("anthropic"), await upstream("vllm", models=("up-model",))


async def behind(gateway: GatewayFactory, fr: Front, vllm: Any) -> Gateway:
    return await gateway(config([{"name": "tiny", "targets": [{**target(vllm, "vllm"), "base_url": fr.url + "/v1"}]}]))


async def messages(gw: Gateway, body: dict[str, Any], **headers: str) -> tuple[int, bytes]:
    async with gw.session.post(gw.url + "/v1/messages", json=body, headers={**HEADERS, **headers}) as resp:
        return resp.status, await resp.read()


def folded(raw: bytes) -> tuple[list[str], str, str | None]:
    """A Messages stream: its event types, its text, its stop reason."""
    kinds, text, stop = [], "", None
    for data in frames(raw):
        event = json.loads(data)
        kinds.append(event["type"])
        text += (event.get("delta") or {}).get("text") or ""
        stop = (event.get("delta") or {}).get("stop_reason") or stop
    return kinds, text, stop


async def test_served_messages_go_native(gateway: GatewayFactory, fakes: tuple[Any, Any]) -> None:
    anthropic, vllm = fakes
    async with front({"/v1/messages": anthropic.origin, "/v1": vllm.origin}) as fr:
        gw = await behind(gateway, fr, vllm)
        status, raw = await messages(gw, {**BODY, "top_k": 3})
        assert status == 200, raw
        whole = json.loads(raw)
        sent = anthropic.requests[-1]
        assert sent.body == {**BODY, "top_k": 3, "model": "up-model"}  # the client's body as it came
        assert sent.headers["authorization"] == "Bearer upstream-key"  # vLLM's way, not x-api-key
        assert whole["type"] == "message" and whole["stop_reason"] == "max_tokens"
        assert whole["usage"]["output_tokens"] == 6 and whole["content"][0]["type"] == "text"
        # a stream that may not resume goes native too (one that may: test_a_stream_that_may_resume_...)
        status, raw = await messages(gw, {**BODY, "stream": True}, **{"X-Gateway-Resume": "off"})
        assert status == 200, raw
        kinds, text, stop = folded(raw)
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
        assert text == whole["content"][0]["text"] and stop == "max_tokens"
        assert not vllm.requests and not fr.missing
        # a 404 the route itself gives (Anthropic's envelope) is the client's error, not a missing route
        status, raw = await messages(gw, {**BODY, "messages": [{"role": "user", "content": "[[fault:status=404]]"}]})
        assert status == 404 and json.loads(raw)["type"] == "error", raw
        assert (await messages(gw, BODY))[0] == 200 and len(anthropic.requests) == 4 and not vllm.requests


async def test_a_stream_that_may_resume_goes_as_chat_with_token_ids(
    gateway: GatewayFactory, fakes: tuple[Any, Any]
) -> None:
    """vLLM's /v1/messages returns no token ids, and a continuation from the text alone is not the
    unbroken answer token for token: a Messages stream that may resume goes as chat, asking for ids."""
    anthropic, vllm = fakes
    async with front({"/v1/messages": anthropic.origin, "/v1": vllm.origin}) as fr:
        gw = await behind(gateway, fr, vllm)
        status, raw = await messages(gw, {**BODY, "stream": True})
        assert status == 200, raw
        kinds, _, stop = folded(raw)
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and stop == "max_tokens"
        (sent,) = vllm.requests
        assert sent.path == "/v1/chat/completions" and sent.body["return_token_ids"] is True
        assert not anthropic.requests
        assert (await messages(gw, BODY))[0] == 200 and len(anthropic.requests) == 1  # whole: native still


async def test_unserved_messages_are_translated_after_one_404(gateway: GatewayFactory, fakes: tuple[Any, Any]) -> None:
    anthropic, vllm = fakes
    async with front({"/v1/chat": vllm.origin, "/v1/models": vllm.origin}) as fr:
        gw = await behind(gateway, fr, vllm)
        status, raw = await messages(gw, BODY)
        assert status == 200, raw
        whole = json.loads(raw)
        assert whole["type"] == "message" and whole["stop_reason"] == "max_tokens"
        assert vllm.requests[-1].path.endswith("/chat/completions")
        status, raw = await messages(gw, {**BODY, "stream": True})
        kinds, text, stop = folded(raw)
        assert status == 200 and text == whole["content"][0]["text"] and stop == "max_tokens"
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert fr.missing == ["/v1/messages"]  # paid once for the target
        assert len(vllm.requests) == 2 and not anthropic.requests


async def test_a_prefill_goes_as_chat_which_continues_it(gateway: GatewayFactory, fakes: tuple[Any, Any]) -> None:
    """vLLM's /v1/messages answers a final assistant turn with a new turn (0.32 sets no
    ``continue_final_message``): a prefill takes the replica's chat path, told to continue it."""
    anthropic, vllm = fakes
    turns = [{"role": "user", "content": "Say hello"}, {"role": "assistant", "content": "Hello"}]
    async with front({"/v1/messages": anthropic.origin, "/v1": vllm.origin}) as fr:
        gw = await behind(gateway, fr, vllm)
        status, raw = await messages(gw, {**BODY, "messages": turns}, **{"X-Gateway-Resume": "off"})
        assert status == 200, raw
        assert not anthropic.requests
        sent = vllm.requests[-1].body
        assert sent["messages"][-1] == {"role": "assistant", "content": "Hello"}
        assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False


async def test_thinking_sent_back_reaches_vllm_either_way(gateway: GatewayFactory, fakes: tuple[Any, Any]) -> None:
    """A reasoning model's thinking, which Claude Code sends back with the next turn: vLLM's own
    /v1/messages takes the body as it came; its chat path, the assistant turn's ``reasoning``."""
    anthropic, vllm = fakes
    thought = {"type": "thinking", "thinking": "Two and two.", "signature": ""}
    turns = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": [thought, {"type": "text", "text": "4"}]},
        {"role": "user", "content": "And 3+3?"},
    ]
    body = {**BODY, "messages": turns}
    async with front({"/v1/messages": anthropic.origin, "/v1": vllm.origin}) as fr:
        gw = await behind(gateway, fr, vllm)
        status, raw = await messages(gw, body)
        assert status == 200, raw
        assert anthropic.requests[-1].body["messages"] == turns
    async with front({"/v1/chat": vllm.origin, "/v1/models": vllm.origin}) as fr:
        gw = await behind(gateway, fr, vllm)
        status, raw = await messages(gw, body)
        assert status == 200, raw
        sent = vllm.requests[-1].body["messages"]
        assert sent[1] == {"role": "assistant", "content": "4", "reasoning": "Two and two."}


async def test_thinking_and_effort_on_the_chat_path_as_vllm_puts_them(
    gateway: GatewayFactory, fakes: tuple[Any, Any], upstream: Any
) -> None:
    """A replica without /v1/messages: Claude Code's adaptive thinking and effort go on its chat path
    as vLLM's own /v1/messages would put them (effort as ``reasoning_effort``, an enabled thinking's
    budget as ``thinking_token_budget``, adaptive as nothing); a target with no reasoning control
    (OpenAI's non-reasoning models) serves the answer without them, and is sent none of them."""
    _, vllm = fakes
    betas = {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,effort-2025-11-24"}
    async with front({"/v1/chat": vllm.origin, "/v1/models": vllm.origin}) as fr:
        gw = await behind(gateway, fr, vllm)
        for thinking, sent in (
            ({"type": "adaptive"}, {"reasoning_effort": "high"}),
            ({"type": "enabled", "budget_tokens": 5}, {"reasoning_effort": "high", "thinking_token_budget": 5}),
        ):
            body = {**BODY, "max_tokens": 8, "thinking": thinking, "output_config": {"effort": "high"}}
            status, raw = await messages(gw, body, **betas)
            assert status == 200, raw
            chat = vllm.requests[-1].body
            assert {k: chat[k] for k in sent} == sent and not {"thinking", "effort", "output_config"} & chat.keys()
    openai = await upstream("openai")
    gw = await gateway(config([{"name": "tiny", "targets": [target(openai, "openai", model="gpt-4o")]}]))
    status, raw = await messages(gw, {**BODY, "output_config": {"effort": "high"}}, **betas)
    assert status == 200 and not {"effort", "reasoning_effort"} & openai.requests[-1].body.keys(), raw

"""A Messages stream relayed as it came from an Anthropic target that breaks mid-answer continues on
the next target, the partial text as its prefill: the client reads one stream (one ``message_start``,
the text block going on, one ending, the unbroken answer's text and output tokens). A stream that
cannot continue (a tool call in progress) ends in an ``error`` event, never as if complete."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.test_anthropic_ingress import HEADERS, WEATHER, events, folded

JSON = Any
PROMPT = "Say something deterministic"


def body(**fields: JSON) -> JSON:
    return {"model": "m", "max_tokens": 12, "stream": True, "messages": [{"role": "user", "content": PROMPT}], **fields}


async def stream(gw: Any, sent: JSON) -> list[tuple[str, JSON]]:
    async with gw.session.post(gw.url + "/v1/messages", json=sent, headers=HEADERS) as resp:
        assert resp.status == 200
        return events(await resp.read())


async def test_a_relayed_stream_goes_on_in_its_text_block(gateway: GatewayFactory, upstream: Any) -> None:
    broken = await upstream("anthropic", faults="[[fault:reset_after=3]]")
    healthy = await upstream("anthropic")
    alone = config([{"name": "m", "targets": [target(healthy, "anthropic")]}])
    pair = config([{"name": "m", "targets": [target(broken, "anthropic", weight=1e6), target(healthy, "anthropic")]}])
    want = await stream(await gateway(alone), body())
    got = await stream(await gateway(pair), body())
    names = [name for name, _ in got]
    assert "error" not in names, got
    assert names.count("message_start") == 1 and names.count("content_block_start") == 1
    assert names[-2:] == ["message_delta", "message_stop"] and names.count("message_stop") == 1
    assert folded(got)["content"] == folded(want)["content"]
    assert folded(got)["usage"] == folded(want)["usage"], got
    assert folded(got)["stop_reason"] == folded(want)["stop_reason"]
    prefill = healthy.requests[-1].body["messages"][-1]  # the continuation's: the text the client had
    assert prefill["role"] == "assistant" and [b["type"] for b in prefill["content"]] == ["text"]
    assert len(prefill["content"][0]["text"]) < len(folded(want)["content"][0]["text"])
    assert folded(want)["content"][0]["text"].startswith(prefill["content"][0]["text"])


async def test_a_tool_call_in_progress_ends_in_an_error_event(gateway: GatewayFactory, upstream: Any) -> None:
    broken = await upstream("anthropic", faults="[[fault:reset_after=1]]")
    healthy = await upstream("anthropic")
    pair = config([{"name": "m", "targets": [target(broken, "anthropic", weight=1e6), target(healthy, "anthropic")]}])
    got = await stream(await gateway(pair), body(tools=[WEATHER], tool_choice={"type": "any"}))
    names = [name for name, _ in got]
    assert names[-1] == "error" and "message_stop" not in names and "message_delta" not in names, got
    assert len(healthy.requests) == 0

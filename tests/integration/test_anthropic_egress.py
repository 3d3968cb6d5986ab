"""Anthropic as an upstream (``provider: anthropic``) behind the fake's Anthropic wire, which keeps
Anthropic's rules (``max_tokens`` required, alternating turns, ``system`` apart) and records what it got:
OpenAI chat clients, whole and streamed, with tools both ways; stop reasons and usage (cache reads and
writes) mapped back; an Anthropic client's body passed through with the fields the gateway does not
model; what Anthropic cannot honour refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import Gateway, GatewayFactory, config, target
from tests.integration.dialect_clients import BEARER, KEY, frames

JSON = Any
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


async def started(gateway: GatewayFactory, upstream: Any) -> tuple[Gateway, Any]:
    server = await upstream("anthropic")
    return await gateway(config([{"name": "claude", "targets": [target(server, "anthropic")]}])), server


async def chat(gw: Gateway, body: JSON, headers: dict[str, str] = BEARER, path: str = "/v1/chat/completions") -> Any:
    async with gw.session.post(gw.url + path, json={"model": "claude", **body}, headers=headers) as resp:
        raw = await resp.read()
        return resp.status, raw


def streamed(raw: bytes) -> tuple[str, list[JSON], str | None, JSON]:
    """An OpenAI chat stream folded: text, tool calls (arguments joined per index), finish, usage."""
    text, calls, finish, usage = "", {}, None, None
    for data in frames(raw):
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        for c in chunk["choices"]:
            delta = c["delta"]
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(call["index"], {"id": None, "name": None, "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] = (call.get("function") or {}).get("name") or slot["name"]
                slot["arguments"] += (call.get("function") or {}).get("arguments") or ""
            finish = c.get("finish_reason") or finish
        usage = chunk.get("usage") or usage
    return text, [calls[i] for i in sorted(calls)], finish, usage


async def test_chat_hoists_system_merges_turns_and_sends_anthropics_headers(
    gateway: GatewayFactory, upstream: Any
) -> None:
    gw, server = await started(gateway, upstream)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
        {"role": "user", "content": "there"},
        {"role": "developer", "content": "No lists."},
    ]
    status, raw = await chat(gw, {"messages": messages})
    assert status == 200, raw
    got = json.loads(raw)
    assert got["choices"][0]["message"]["content"] and got["choices"][0]["finish_reason"] in ("stop", "length")
    sent = server.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "upstream-key" and sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert sent.body["system"] == "Be brief.\n\nNo lists."
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}
    ]
    assert sent.body["max_tokens"] == 4096  # Anthropic requires it; the client gave none


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_tools_both_ways_with_their_ids(gateway: GatewayFactory, upstream: Any, stream: bool) -> None:
    gw, server = await started(gateway, upstream)
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    body = {"messages": ask, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 50, "stream": stream}
    body |= {"stream_options": {"include_usage": True}} if stream else {}
    status, raw = await chat(gw, body)
    assert status == 200, raw
    if stream:
        _, calls, finish, usage = streamed(raw)
    else:
        choice = json.loads(raw)["choices"][0]
        calls = [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in choice["message"]["tool_calls"]
        ]
        finish, usage = choice["finish_reason"], json.loads(raw)["usage"]
    assert finish == "tool_calls"
    (call,) = calls
    assert call["name"] == "get_weather" and set(json.loads(call["arguments"])) == {"city"}
    assert usage["completion_tokens"] == 3
    sent = server.requests[-1].body
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "input_schema": WEATHER["function"]["parameters"],
            "description": "The weather in a city",
        }
    ]
    assert sent["tool_choice"] == {"type": "any"}
    history = [
        *ask,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        {"role": "user", "content": "Thanks; and tomorrow?"},
    ]
    status, raw = await chat(gw, {"messages": history, "tools": [WEATHER], "max_tokens": 4})
    assert status == 200, raw
    turns = server.requests[-1].body["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": call["id"], "name": "get_weather", "input": json.loads(call["arguments"])}
    ]
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": call["id"], "content": "sunny"},
        {"type": "text", "text": "Thanks; and tomorrow?"},
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_cache_tokens_and_stop_reasons_mapped_back(gateway: GatewayFactory, upstream: Any, stream: bool) -> None:
    gw, server = await started(gateway, upstream)
    body = {
        "messages": [
            {"role": "user", "content": "Hi there, please answer at some length [[fault:cached=3,cache_write=2]]"}
        ],
        "max_tokens": 4,
    }
    body |= {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    status, raw = await chat(gw, body)
    assert status == 200, raw
    usage = streamed(raw)[3] if stream else json.loads(raw)["usage"]
    reported = server.sent[0] if stream else None
    prompt = usage["prompt_tokens"]
    assert prompt > 5 and usage["completion_tokens"] == 4 and usage["total_tokens"] == prompt + 4
    # input_tokens (cache reads and writes left out) + reads + writes: the whole prompt
    if reported is not None:
        first = json.loads(reported)["message"]["usage"]
        assert first["input_tokens"] + 3 + 2 == prompt
    # an Anthropic client sees the cache reads and writes as Anthropic reports them
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    anthropic_body = {"messages": body["messages"], "max_tokens": 4, "stream": stream}
    status, raw = await chat(gw, anthropic_body, headers, "/v1/messages")
    assert status == 200, raw
    # relayed as Anthropic wrote it: a stream's cache figures are in its message_start
    got = next(json.loads(d)["message"] for d in frames(raw) if '"message_start"' in d) if stream else json.loads(raw)
    assert got["usage"]["cache_read_input_tokens"] == 3 and got["usage"]["cache_creation_input_tokens"] == 2
    assert got["usage"]["input_tokens"] + 3 + 2 == prompt


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_stop_sequence_comes_back_named(gateway: GatewayFactory, upstream: Any, stream: bool) -> None:
    from tests.fakes import upstream as fake

    gw, server = await started(gateway, upstream)
    word = fake.tokenize(fake.expected("Say it", 8))[2].strip()
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    body = {"messages": [{"role": "user", "content": "Say it"}], "max_tokens": 8, "stop_sequences": [word]}
    status, raw = await chat(gw, body | {"stream": stream}, headers, "/v1/messages")
    assert status == 200, raw
    events = [json.loads(d) for d in frames(raw)] if stream else []
    delta = next(e["delta"] for e in events if e["type"] == "message_delta") if stream else json.loads(raw)
    assert delta["stop_reason"] == "stop_sequence" and delta["stop_sequence"] == word
    status, raw = await chat(gw, {"messages": [{"role": "user", "content": "Say it"}], "max_tokens": 8, "stop": [word]})
    assert json.loads(raw)["choices"][0]["finish_reason"] == "stop"
    assert server.requests[-1].body["stop_sequences"] == [word]


async def test_anthropic_clients_pass_through_unmodelled_fields(gateway: GatewayFactory, upstream: Any) -> None:
    gw, server = await started(gateway, upstream)
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "context-1m-2025-08-07"}
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "max_tokens": 4,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "container": "container_1",
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
    }
    status, raw = await chat(gw, body, headers, "/v1/messages")
    assert status == 200, raw
    sent = server.requests[-1]
    assert sent.body == {"model": "up-model", **body}
    assert sent.headers["anthropic-beta"] == "context-1m-2025-08-07"
    assert sent.headers["x-api-key"] == "upstream-key"  # the gateway's key, never the client's
    # the same body to a target that is not Anthropic's is refused, naming what only Anthropic serves
    vllm = await upstream("vllm", models=("up-model",))
    other = await gateway(config([{"name": "claude", "targets": [target(vllm, "vllm")]}]))
    status, raw = await chat(other, body, headers, "/v1/messages")
    assert status == 400 and "anthropic-beta context-1m-2025-08-07" in json.loads(raw)["error"]["message"]
    assert not vllm.requests


async def test_what_anthropic_cannot_honour_is_refused_by_name(gateway: GatewayFactory, upstream: Any) -> None:
    gw, server = await started(gateway, upstream)
    for field, value in (("seed", 3), ("n", 2), ("logprobs", True), ("presence_penalty", 0.5)):
        status, raw = await chat(gw, {"messages": [{"role": "user", "content": "Hi"}], field: value})
        assert status == 400, (field, raw)
        assert f"'{field}'" in json.loads(raw)["error"]["message"]
    assert not server.requests


@pytest.mark.parametrize(
    ("marker", "status"), [("[[fault:status=429,retry_after=2]]", 429), ("[[fault:status=529]]", 502)]
)
async def test_upstream_errors(gateway: GatewayFactory, upstream: Any, marker: str, status: int) -> None:
    gw, _ = await started(gateway, upstream)
    got, raw = await chat(gw, {"messages": [{"role": "user", "content": marker}]})
    assert got == status, raw


async def test_stream_error_event_fails_the_stream_in_band(gateway: GatewayFactory, upstream: Any) -> None:
    gw, _ = await started(gateway, upstream)
    body = {"messages": [{"role": "user", "content": "Go [[fault:error_after=2]]"}], "max_tokens": 8, "stream": True}
    status, raw = await chat(gw, body)
    assert status == 200
    datas = frames(raw)
    assert "error" in json.loads(datas[-1]) and "[DONE]" not in datas


async def test_effort_and_thinking_reach_an_anthropic_target_either_way(gateway: GatewayFactory, upstream: Any) -> None:
    """``output_config.effort`` and ``thinking``: as they came to a target that passes the body through,
    written back by the translation to one with ``passthrough: false``."""
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "effort-2025-11-24"}
    body = {
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "low"},
    }
    for passthrough in (True, False):
        server = await upstream("anthropic", models=("up-model",), api_key="upstream-key")
        claude = {"name": "claude", "targets": [target(server, "anthropic", passthrough=passthrough)]}
        gw = await gateway(config([claude]))
        status, raw = await chat(gw, body, headers, "/v1/messages")
        assert status == 200, raw
        sent = server.requests[-1]
        assert sent.body["output_config"] == {"effort": "low"} and sent.body["thinking"] == {"type": "adaptive"}
        assert sent.headers["anthropic-beta"] == "effort-2025-11-24"

"""The Anthropic codec alone: a Messages body's parts in the internal request (every prompt text where
the token estimate counts it), and the stream encoder's block bookkeeping."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.errors import InvalidRequest, NoHealthyTarget, RateLimited, UpstreamFailed
from gateway.core.request import Feature
from gateway.core.response import Delta, Finish, StreamStart, Usage, UsageReport
from gateway.dialects import ANTHROPIC
from gateway.dialects.anthropic.parse import check_betas, parse
from gateway.dialects.anthropic.render import MessagesEncoder, anthropic_error
from gateway.limits.plan import estimate_prompt

JSON = Any


def body(**fields: JSON) -> JSON:
    return {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **fields}


def test_prompt_parts_all_reach_the_request() -> None:
    req = parse(
        body(
            system=[
                {"type": "text", "text": "rule one"},
                {"type": "text", "text": "rule two", "cache_control": {"type": "ephemeral"}},
            ],
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "secret", "signature": "s"},
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "boom"}],
                            "is_error": True,
                        },
                        {"type": "text", "text": "and?"},
                    ],
                },
            ],
            tools=[{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
            tool_choice={"type": "tool", "name": "f", "disable_parallel_tool_use": True},
            metadata={"user_id": "u1"},
        )
    )
    system, user, assistant, tool, last = req.messages
    assert (system.role, system.content) == ("system", "rule one\n\nrule two")
    assert user.content == (
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    )
    assert assistant.content == "calling" and "secret" not in json.dumps(assistant.content)
    assert assistant.tool_calls == (
        {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
    )
    assert (tool.role, tool.content, tool.tool_call_id) == ("tool", "Error: boom", "toolu_1")
    assert (last.role, last.content) == ("user", "and?")
    assert req.chat is not None and req.chat.tools == (
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "description": "d"}},
    )
    assert (
        req.chat.tool_choice == {"type": "function", "function": {"name": "f"}}
        and req.chat.parallel_tool_calls is False
    )
    assert req.user == "u1" and req.features == {Feature.TOOLS}


def test_long_system_and_tool_results_raise_the_estimate() -> None:
    small = estimate_prompt(parse(body()))
    assert estimate_prompt(parse(body(system="x" * 4000))) >= small + 900
    result = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "y" * 4000}]}]
    assert estimate_prompt(parse(body(messages=result))) >= small + 900


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"container": "x"}, "container"),
        ({"messages": [{"role": "user", "content": []}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages[0].content[0]"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({"tool_choice": {"type": "tool"}, "tools": [{"name": "f", "input_schema": {}}]}, "tool_choice.name"),
        ({"stop_sequences": [""]}, "stop_sequences"),
    ],
)
def test_refusals_name_the_field(fields: JSON, named: str) -> None:
    data = {k: v for k, v in (body() | fields).items() if v is not None}
    with pytest.raises(InvalidRequest) as err:
        parse(data)
    assert named in err.value.message


def test_thinking_is_a_feature_and_betas_are_refused_by_name() -> None:
    req = parse(body(thinking={"type": "enabled", "budget_tokens": 1024}))
    assert Feature.THINKING in req.features and req.field_name(Feature.THINKING) == "thinking"
    assert Feature.THINKING not in parse(body(thinking={"type": "disabled"})).features
    check_betas({"anthropic-beta": "prompt-caching-2024-07-31, fine-grained-tool-streaming-2025-05-14"})
    with pytest.raises(InvalidRequest, match="interleaved-thinking-2025-05-14"):
        check_betas({"anthropic-beta": "prompt-caching-2024-07-31,interleaved-thinking-2025-05-14"})


def decode(raw: bytes) -> list[tuple[str, JSON]]:
    out = []
    for block in raw.decode().strip().split("\n\n"):
        name, data = block.split("\n")
        out.append((name[7:], json.loads(data[6:])))
    return out


def test_encoder_opens_one_block_at_a_time() -> None:
    req = parse(body(stream=True))
    enc = MessagesEncoder(req)
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    raw = b"".join(
        [
            enc.event(StreamStart("id1", 0, "m")),
            enc.event(Delta(0, "Hel", role="assistant")),
            enc.event(Delta(0, "lo")),
            enc.event(Delta(0, tool_calls=(call,))),
            enc.event(Delta(0, tool_calls=({"index": 0, "function": {"arguments": ":1}"}},))),
            enc.event(Delta(0, tool_calls=({"index": 1, "id": "c2", "function": {"name": "g", "arguments": "{}"}},))),
            enc.event(Finish(0, "tool_calls")),
            enc.event(UsageReport(Usage(10, 5, cached_tokens=4))),
            enc.end(),
        ]
    )
    evs = decode(raw)
    assert [n for n, _ in evs] == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert evs[6][1]["content_block"] == {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    assert [e[1]["delta"]["partial_json"] for e in evs[7:9]] == ['{"a"', ":1}"]
    assert evs[10][1]["index"] == 2
    assert evs[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert evs[-2][1]["usage"] == {
        "input_tokens": 6, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4
    }  # fmt: skip


def test_empty_answer_has_one_empty_text_block() -> None:
    enc = MessagesEncoder(parse(body(stream=True)))
    raw = enc.event(StreamStart("id1", 0, "m")) + enc.event(Finish(0, "stop")) + enc.end()
    names = [n for n, _ in decode(raw)]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_errors_in_anthropics_envelope() -> None:
    limited = RateLimited("slow down", retry_after=2.5)
    reply = anthropic_error(limited)
    assert (reply.status, reply.body["error"]["type"], reply.headers["Retry-After"]) == (429, "rate_limit_error", "3")
    assert ANTHROPIC.error(UpstreamFailed("x")).body == {
        "type": "error",
        "error": {"type": "api_error", "message": "x"},
    }


def test_gateway_503_is_anthropics_529_overloaded() -> None:
    reply = ANTHROPIC.error(NoHealthyTarget("all cooling"))
    assert (reply.status, reply.body["error"]["type"]) == (529, "overloaded_error")

"""The Anthropic codec alone: a Messages body's parts in the internal request (every prompt text where
the token estimate counts it), and the stream encoder's block bookkeeping."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import InvalidRequest, NoHealthyTarget, RateLimited, UpstreamFailed
from gateway.core.request import Feature
from gateway.core.response import Choice, Completion, Delta, Finish, StreamStart, Usage, UsageReport
from gateway.dialects import ANTHROPIC
from gateway.dialects.anthropic.parse import betas_of, parse, parse_count
from gateway.dialects.anthropic.render import MessagesEncoder, anthropic_error, render
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
    assert assistant.reasoning == "secret"  # the turn's thinking, for a wire that takes it back
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
    assert req.user == "u1" and req.features == {Feature.TOOLS, Feature.THOUGHTS}
    assert req.field_name(Feature.THOUGHTS) == "messages[1].content[0]"
    assert req.field_reason(Feature.THOUGHTS).startswith("a 'thinking' block")


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
        ({"messages": [{"role": "user", "content": []}]}, "messages[0].content"),
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


TOOL_TURNS = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
]


def _result(*parts: JSON) -> JSON:
    return {
        "messages": [
            *TOOL_TURNS,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": list(parts)}]},
        ]
    }


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]},
            "system[0].cache_control.ttl",
        ),
        ({"system": [{"type": "text", "text": 5}]}, "system[0].text"),
        ({"system": 5}, "system"),
        (_result({"type": "text", "text": 5}), "messages[2].content[0].content[0].text"),
        (_result({"type": "image", "source": {"type": "url"}}), "messages[2].content[0].content[0].source.url"),
        (_result(), None),
    ],
)
def test_a_union_field_is_judged_by_the_member_its_value_took(fields: JSON, param: str | None) -> None:
    """A string-or-blocks field (``system``, a tool result's ``content``) given blocks, one of them
    wrong: the error names the wrong key inside the blocks, not the field as if a string were due."""
    if param is None:  # an empty result is a result without content, as Anthropic takes it
        parse(body() | fields)
        return
    with pytest.raises(InvalidRequest) as err:
        parse(body() | fields)
    assert err.value.param == param, err.value.message
    assert err.value.message.startswith(f"'{param}'"), err.value.message


def test_thinking_and_platform_features_are_named_features() -> None:
    req = parse(body(thinking={"type": "enabled", "budget_tokens": 1024}))
    assert Feature.THINKING in req.features and req.field_name(Feature.THINKING) == "thinking"
    assert Feature.THINKING not in parse(body(thinking={"type": "disabled"})).features
    honoured = betas_of({"anthropic-beta": "prompt-caching-2024-07-31, fine-grained-tool-streaming-2025-05-14"})
    assert honoured == "prompt-caching-2024-07-31,fine-grained-tool-streaming-2025-05-14"
    req = parse(body(), honoured)  # sent on to an Anthropic target, refused by no other
    assert Feature.ANTHROPIC_NATIVE not in req.features and req.anthropic_beta == honoured
    betas = betas_of({"anthropic-beta": " prompt-caching-2024-07-31,,context-1m-2025-08-07"})
    assert betas == "prompt-caching-2024-07-31,context-1m-2025-08-07"
    req = parse(body(), betas)
    assert req.field_name(Feature.ANTHROPIC_NATIVE) == "anthropic-beta context-1m-2025-08-07"
    assert req.anthropic_beta == betas
    # a beta that turns on a feature is that feature (served where it is), not Anthropic's alone
    req = parse(body(), "claude-code-20250219,interleaved-thinking-2025-05-14,effort-2025-11-24")
    assert Feature.ANTHROPIC_NATIVE not in req.features
    assert req.field_name(Feature.THINKING) == "anthropic-beta interleaved-thinking-2025-05-14"
    assert req.field_name(Feature.EFFORT) == "anthropic-beta effort-2025-11-24"


@pytest.mark.parametrize("level", ["low", "medium", "high", "xhigh", "max"])
def test_an_effort_alone_is_a_feature_and_anything_else_in_output_config_anthropics(level: str) -> None:
    req = parse(body(output_config={"effort": level}))
    assert req.features & {Feature.EFFORT, Feature.ANTHROPIC_NATIVE} == {Feature.EFFORT}
    assert req.field_name(Feature.EFFORT) == "output_config.effort"
    assert req.chat is not None and req.chat.reasoning == {"effort": level}
    for config in ({"effort": "turbo"}, {"effort": level, "format": {"type": "json_schema"}}, {"effort": 1}):
        other = parse(body(output_config=config))
        assert Feature.EFFORT not in other.features and other.field_name(Feature.ANTHROPIC_NATIVE) == "output_config"
    both = parse(body(thinking={"type": "adaptive"}, output_config={"effort": level}))
    assert both.chat is not None and both.chat.reasoning == {"thinking": {"type": "adaptive"}, "effort": level}
    server = parse(body(tools=[{"type": "web_search_20250305", "name": "web_search"}]))
    assert server.field_name(Feature.ANTHROPIC_NATIVE) == "tools[0]"
    assert server.field_reason(Feature.ANTHROPIC_NATIVE).startswith("server tool 'web_search_20250305'")
    assert parse(body(container="c")).field_name(Feature.ANTHROPIC_NATIVE) == "container"
    assert parse(body(container="c")).field_reason(Feature.ANTHROPIC_NATIVE)
    assert parse(body(container="c")).native == body(container="c")  # for an Anthropic target, as it came


CLAUDE_CODE_BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,thinking-token-count-2026-05-13,"
    "context-management-2025-06-27,prompt-caching-scope-2026-01-05,mid-conversation-system-2026-04-07,"
    "effort-2025-11-24"
)
THOUGHT = {"type": "thinking", "thinking": "t", "signature": "s"}


def turns(*thinks: bool) -> list[JSON]:
    """A conversation whose assistant turns hold a thinking block where ``thinks`` says."""
    out: list[JSON] = [{"role": "user", "content": "q"}]
    for t in thinks:
        out.append({"role": "assistant", "content": [*([THOUGHT] if t else []), {"type": "text", "text": "a"}]})
        out.append({"role": "user", "content": "q"})
    return out


def test_claude_codes_default_request_is_no_platform_feature() -> None:
    """What Claude Code 2.1.197 sends by default (no CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS): every beta,
    and thinking clearing that keeps all: served on every target where thinking and effort are."""
    data = body(
        thinking={"type": "adaptive"},
        output_config={"effort": "high"},
        context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    )
    req = parse(data, CLAUDE_CODE_BETAS)
    assert Feature.ANTHROPIC_NATIVE not in req.features
    assert req.features >= {Feature.THINKING, Feature.EFFORT}
    assert req.native == data and req.anthropic_beta == CLAUDE_CODE_BETAS


@pytest.mark.parametrize(
    ("config", "thinks", "kept"),
    [
        ({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}, (True, True), True),
        ({"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "all"}}]}, (True,), True),
        ({"edits": []}, (), True),
        ({}, (True,), True),
        # the default keeps the last assistant turn's thinking: nothing older holds any
        ({"edits": [{"type": "clear_thinking_20251015"}]}, (False, True), True),
        ({"edits": [{"type": "clear_thinking_20251015"}]}, (True, False), False),
        (
            {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}}]},
            (True, True),
            True,
        ),
        (
            {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]},
            (True, True),
            False,
        ),
        ({"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}}]}, (), False),
        (
            {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": True}}]},
            (),
            False,
        ),
        ({"edits": [{"type": "clear_tool_uses_20250919"}]}, (), False),
        ({"edits": [{"type": "compact_20260112"}]}, (), False),
        ({"edits": [{"type": "clear_thinking_20251015", "keep": "all", "x": 1}]}, (), False),
        ({"edits": "all"}, (), False),
        ({"other": 1}, (), False),
        ([], (), False),
    ],
)
def test_context_management_that_edits_nothing_is_served_anywhere(
    config: JSON, thinks: tuple[bool, ...], kept: bool
) -> None:
    req = parse(body(messages=turns(*thinks), context_management=config), "context-management-2025-06-27")
    if kept:
        assert (
            Feature.ANTHROPIC_NATIVE not in req.features
            or req.field_name(Feature.ANTHROPIC_NATIVE) != "context_management"
        )
    else:
        assert req.field_name(Feature.ANTHROPIC_NATIVE) == "context_management"
    assert req.native is not None and req.native["context_management"] == config  # to Anthropic as it came


def test_thinking_sent_back_is_the_turns_reasoning_where_a_wire_takes_it() -> None:
    """Earlier turns' thinking (Claude Code sends a reasoning model's back): Anthropic's as it came,
    a chat wire's assistant ``reasoning`` (vLLM's templates read it); redacted thinking is opaque and
    only Anthropic reads it (vLLM's own /v1/messages passes over it too)."""
    turns = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [THOUGHT, {"type": "redacted_thinking", "data": "zz"}, {"type": "text", "text": "a"}],
        },
        {"role": "user", "content": "more"},
    ]
    req = parse(body(messages=turns))
    assert req.features == {Feature.THOUGHTS} and req.field_name(Feature.THOUGHTS) == "messages[1].content[0]"
    assert req.messages[1].reasoning == "t" and req.messages[1].content == "a"
    assert req.native is not None and req.native["messages"] == turns  # to Anthropic as it came


UNMODELLED = [
    ({"citations": {"enabled": True}}, "citations"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages[0].content[0].type"),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "citations": [{"a": 1}]}]}]},
        "messages[0].content[0].citations",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "new_key": 1}]}]},
        "messages[0].content[0].new_key",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "search_result"}]}],
                }
            ]
        },
        "messages[0].content[0].content[0].type",
    ),
    ({"system": [{"type": "text", "text": "s", "x": 1}]}, "system[0].x"),
]


@pytest.mark.parametrize(("fields", "named"), UNMODELLED)
def test_what_only_anthropic_takes_is_a_named_feature_and_the_body_kept(fields: JSON, named: str) -> None:
    """The class: any key or block the schema does not model goes to Anthropic as it came, and is
    named for every other target (which refuses it, never dropping it)."""
    data = body() | fields
    req = parse(data)
    assert req.field_name(Feature.ANTHROPIC_NATIVE) == named
    assert req.native == data


NOT_BLOCKS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4), st.lists(st.none(), max_size=2))


def with_block(where: str, block: JSON, j: int) -> tuple[JSON, str]:
    """A body with ``block`` at index ``j`` of the block list at ``where``, and that block's path."""
    text = [{"type": "text", "text": "x"}] * j
    blocks = [*text, block, {"type": "text", "text": "y"}]
    if where == "system":
        return body(system=blocks), f"system[{j}]"
    if where == "tool_result":
        result = {"type": "tool_result", "tool_use_id": "t1", "content": blocks}
        turns = [*TOOL_TURNS, {"role": "user", "content": [result]}]
        return body(messages=turns), f"messages[2].content[0].content[{j}]"
    return body(messages=[{"role": "user", "content": blocks}]), f"messages[0].content[{j}]"


@given(st.sampled_from(["messages", "system", "tool_result"]), NOT_BLOCKS, st.integers(0, 2), st.booleans())
def test_a_block_that_is_not_an_object_is_refused_naming_it(where: str, block: JSON, j: int, count: bool) -> None:
    """A null block was taken for one only Anthropic takes and dropped: another target got "-" for a
    turn of nulls, and an Anthropic target the null, which it refuses naming no gateway field."""
    data, named = with_block(where, block, j)
    if count:
        data.pop("max_tokens")
    with pytest.raises(InvalidRequest) as err:
        (parse_count if count else parse)(data)
    assert f"'{named}'" in err.value.message, err.value.message


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


def test_a_tool_call_without_an_id_gets_one() -> None:
    """An upstream that names no tool call id (some OpenAI-compatible servers) still gives the client
    a ``tool_use`` id its ``tool_result`` can name: unique, never empty, whole and streamed."""
    calls = [{"index": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in range(2)]
    whole = render(parse(body()), Completion("id1", 0, "m", [Choice(0, tool_calls=calls, finish_reason="tool_calls")]))
    ids = [b["id"] for b in whole["content"] if b["type"] == "tool_use"]
    assert len(ids) == 2 and len(set(ids)) == 2 and all(i.startswith("toolu_") for i in ids), whole
    enc = MessagesEncoder(parse(body(stream=True)))
    raw = enc.event(StreamStart("id1", 0, "m")) + b"".join(enc.event(Delta(0, tool_calls=(c,))) for c in calls)
    starts = [e["content_block"] for n, e in decode(raw + enc.end()) if n == "content_block_start"]
    assert len({b["id"] for b in starts}) == 2 and all(b["id"].startswith("toolu_") for b in starts), starts


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


# --- the egress side: the internal request as a Messages body, and Anthropic's answers back --------


def test_egress_encodes_what_anthropic_requires() -> None:
    from gateway.core.request import ChatMessage, ChatOptions, InternalRequest, Operation, Sampling
    from gateway.dialects.anthropic.egress import encode

    req = InternalRequest(
        Operation.CHAT,
        "m",
        messages=(
            ChatMessage("system", "s1"),
            ChatMessage("user", ({"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},)),
            ChatMessage("user", "more"),
            ChatMessage(
                "assistant",
                None,
                tool_calls=({"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},),
            ),
            ChatMessage("tool", "42", tool_call_id="c1"),
        ),
        sampling=Sampling(stop=("END",), temperature=0.5),
        chat=ChatOptions(
            tools=({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},),
            tool_choice="auto",
            parallel_tool_calls=False,
        ),
        user="u",
    )
    body = encode(req, "claude")
    assert body["system"] == "s1" and body["max_tokens"] == 4096 and body["stop_sequences"] == ["END"]
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
        {"type": "text", "text": "more"},
    ]
    assert body["messages"][1]["content"] == [{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}]
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "c1", "content": "42"}]
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["metadata"] == {"user_id": "u"} and body["temperature"] == 0.5


def test_egress_reads_anthropics_stream() -> None:
    from gateway.core.response import Accumulator
    from gateway.dialects.anthropic.egress import EventReader

    reader = EventReader()
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "model": "claude",
                "usage": {
                    "input_tokens": 5,
                    "cache_read_input_tokens": 2,
                    "cache_creation_input_tokens": 1,
                    "output_tokens": 1,
                },
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a":'}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 7},
        },
        {"type": "message_stop"},
    ]
    acc = Accumulator()
    for ev in events:
        acc.extend(reader.decode(ev))
    acc.extend(reader.finish())
    done = acc.completion()
    (choice,) = done.choices
    assert choice.text == "Hi" and choice.finish_reason == "tool_calls" and reader.finished
    args = "".join(c["function"]["arguments"] for c in choice.tool_calls or ())
    assert args == '{"a":1}' and (choice.tool_calls or [])[0]["id"] == "toolu_1"
    assert done.usage == Usage(8, 7, cached_tokens=2, cache_write_tokens=1)


def test_egress_refuses_what_has_no_anthropic_form() -> None:
    from gateway.core.request import ChatMessage, InternalRequest, Operation, Sampling
    from gateway.dialects.anthropic.egress import encode

    with pytest.raises(InvalidRequest, match="presence_penalty"):
        encode(
            InternalRequest(
                Operation.CHAT, "m", messages=(ChatMessage("user", "x"),), sampling=Sampling(presence_penalty=1)
            ),
            "c",
        )
    bad_args = ChatMessage("assistant", None, tool_calls=({"id": "c", "function": {"name": "f", "arguments": "[1]"}},))
    with pytest.raises(InvalidRequest, match=r"messages\[0\]\.tool_calls\[0\]\.function\.arguments"):
        encode(InternalRequest(Operation.CHAT, "m", messages=(bad_args,)), "c")


def test_cache_writes_are_priced_apart() -> None:
    from decimal import Decimal

    from gateway.limits.prices import PriceTable
    from gateway.runtime.spend_config import Price, SpendSettings

    price = Price(
        model="c", input=Decimal(3), cached_input=Decimal("0.3"), cache_write=Decimal("3.75"), output=Decimal(15)
    )
    table = PriceTable.of(SpendSettings(prices=(price,)))
    rate = table.rate("c", "t")
    assert rate is not None
    # 100 prompt tokens: 50 fresh, 30 read from the cache, 20 written to it; 10 completion tokens
    assert rate.cost(100, 30, 10, 20) == 50 * 3 + 9 + 75 + 150
    assert rate.cost(100, 30, 10) == 70 * 3 + 9 + 150  # no writes: as before
    plain = PriceTable.of(SpendSettings(prices=(Price(model="c", input=Decimal(3), output=Decimal(15)),))).rate(
        "c", "t"
    )
    assert plain is not None and plain.cost(100, 0, 0, 20) == 300  # cache_write defaults to input

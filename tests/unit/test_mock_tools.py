"""The ``mock`` provider's tool calls and thinking: a forced or asked-for call with arguments its
schema admits, text otherwise; thinking only when enabled, within its budget and the answer's
``max_tokens``; whole and streamed answers the same."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.mock import MockEngine
from backends.mock.tools import call, least
from gateway.core.request import ChatMessage, ChatOptions, InternalRequest, Operation, Sampling
from gateway.core.response import Accumulator, Completion
from gateway.core.upstream import Call
from gateway.dialects.anthropic.parse import parse
from gateway.runtime.config import Target

JSON = Any
SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string"}, "timeout": {"type": "integer", "minimum": 1}},
    "required": ["command", "timeout"],
}
TOOLS = (
    {"type": "function", "function": {"name": "Bash", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}},
)


def request(*turns: tuple[str, str], choice: JSON = None, reasoning: JSON = None, **sampling: Any) -> InternalRequest:
    chat = ChatOptions(tools=TOOLS, tool_choice=choice, reasoning=reasoning)
    msgs = tuple(ChatMessage(role, text) for role, text in turns)
    return InternalRequest(Operation.CHAT, "demo", messages=msgs, chat=chat, sampling=Sampling(**sampling))


def engine() -> MockEngine:
    return MockEngine(Target(provider="mock", engine={"tokens_per_second": 0}), "demo")


async def both(req: InternalRequest) -> tuple[Completion, Completion]:
    mock = engine()
    whole = await mock.complete(req, Call("r1"))
    streamed = Accumulator().extend([ev async for b in mock.stream(req, Call("r1")) for ev in b.events])
    return whole, streamed.completion()


@pytest.mark.parametrize(
    ("turns", "choice", "called"),
    [
        ((("user", "hi"),), None, None),
        ((("user", "hi"),), "auto", None),
        ((("user", "hi"),), "required", ("Bash", {"command": "mock", "timeout": 1})),
        ((("user", "hi"),), {"type": "function", "function": {"name": "Read"}}, ("Read", {})),
        ((("user", "hi"),), {"type": "function", "function": {"name": "Nope"}}, None),
        ((("user", 'go [mock-tool Bash {"command":"ls"}]'),), None, ("Bash", {"command": "ls"})),
        ((("user", 'go [mock-tool Bash {"a": {"b": [1]}}] now'),), None, ("Bash", {"a": {"b": [1]}})),
        ((("user", "go [mock-tool Read]"), ("system", "be brief")), "auto", ("Read", {})),
        ((("user", "go [mock-tool Bash {not json}]"),), None, ("Bash", {})),
        ((("user", "go [mock-tool Nope]"),), None, None),
        ((("user", "go [mock-tool Read]"),), "none", None),
        ((("user", "go [mock-tool Read]"), ("tool", "file.txt")), None, None),  # the result: answered
    ],
)
def test_the_mock_calls_a_tool_when_forced_or_asked(turns: Any, choice: JSON, called: Any) -> None:
    assert call(request(*turns, choice=choice)) == called


async def test_a_call_is_the_answers_only_output_whole_and_streamed() -> None:
    for c in await both(request(("user", "hi"), choice="required")):
        (choice,) = c.choices
        assert choice.finish_reason == "tool_calls" and choice.text == ""
        (made,) = choice.tool_calls or []
        assert made["function"] == {"name": "Bash", "arguments": '{"command":"mock","timeout":1}'}
        assert made["id"] == "call_mock_r1_0" and c.usage.completion_tokens > 0


async def test_thinking_enabled_thinks_within_budget_and_max_tokens() -> None:
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 3}}
    whole, streamed = await both(request(("user", "hi"), reasoning=thinking, max_tokens=5))
    assert whole == streamed
    (choice,) = whole.choices
    assert choice.reasoning and 1 <= whole.usage.reasoning_tokens <= 3  # type: ignore[operator]
    assert whole.usage.completion_tokens <= 5 and choice.text
    for none in ({"thinking": {"type": "adaptive"}}, {"effort": "high"}, None):
        (plain,) = (await both(request(("user", "hi"), reasoning=none)))[0].choices
        assert plain.reasoning is None and plain.text


SCHEMAS = st.recursive(
    st.sampled_from(
        [
            {"type": "string"},
            {"type": "string", "minLength": 9},
            {"type": "integer", "minimum": 3},
            {"type": "integer", "exclusiveMinimum": 3},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"enum": ["a", "b"]},
            {"const": 7},
            {"type": ["string", "null"]},
        ]
    ),
    lambda inner: st.one_of(
        st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=4).map(
            lambda props: {"type": "object", "properties": props, "required": sorted(props)}
        ),
        inner.map(lambda item: {"type": "array", "items": item, "minItems": 2}),
        st.lists(inner, min_size=1, max_size=3).map(lambda options: {"anyOf": options}),
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(SCHEMAS)
def test_least_arguments_are_valid_for_their_schema(schema: JSON) -> None:
    top = (
        schema if schema.get("type") == "object" else {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    )
    value = least(top)
    jsonschema.validate(value, top)
    json.dumps(value)  # arguments go out as JSON


async def test_a_prefill_is_continued() -> None:
    """An Anthropic client's last turn the assistant's: the mock's words go on from it (its words are
    its own either way), where every other target but vLLM's chat path and Anthropic refuses it."""
    req = parse(
        {
            "model": "demo",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "The"}],
        }
    )
    whole = await engine().complete(req, Call("r1"))
    assert whole.choices[0].text and whole.usage.completion_tokens <= 8

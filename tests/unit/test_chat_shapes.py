"""OpenAI chat's JSON-kept structures (content parts, tools, tool calls, a named tool choice) are
checked where OpenAI defines their shape, in every dialect that takes OpenAI's chat messages; a
content part's type is one a target takes (vLLM's own media parts go on for it to judge their shape),
any other is refused naming it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import InvalidRequest
from gateway.dialects.friendli.parse import parse_chat as friendli_chat
from gateway.dialects.octoai.parse import parse_chat as octoai_chat
from gateway.dialects.openai.parse import parse_chat
from gateway.dialects.sgp.parse import parse_chat as sgp_chat

JSON = Any
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def chat(*content: JSON, role: str = "user", **fields: JSON) -> dict[str, JSON]:
    return {"model": "m", "messages": [{"role": role, "content": list(content)}], **fields}


BAD = [
    (chat({"type": "text", "text": 5}), "messages[0].content[0].text"),
    (chat({"type": "text"}), "messages[0].content[0].text"),
    (
        chat({"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": 5}}),
        "messages[0].content[1].image_url.url",
    ),
    (chat({"type": "image_url", "image_url": None}), "messages[0].content[0].image_url"),
    (chat({"type": "input_audio", "input_audio": {"data": "x"}}), "messages[0].content[0].input_audio.format"),
    (chat({"type": "file", "file": "x"}), "messages[0].content[0].file"),
    (chat({"type": "text", "text": "a"}, tools=[{"type": "function", "function": {}}]), "tools[0].function.name"),
    (chat({"type": "text", "text": "a"}, tools=[{"type": "function"}]), "tools[0].function"),
    (
        chat({"type": "text", "text": "a"}, tools=[{**TOOL, "function": {"name": "f", "parameters": []}}]),
        "tools[0].function.parameters",
    ),
    (
        chat({"type": "text", "text": "a"}, tools=[TOOL], tool_choice={"type": "function", "function": {"name": 5}}),
        "tool_choice.function.name",
    ),
    (chat({"type": "text", "text": "a"}, tools=[TOOL], tool_choice={"type": "function"}), "tool_choice.function"),
    (
        {
            "model": "m",
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}],
                }
            ],
        },
        "messages[0].tool_calls[0].function.arguments",
    ),
]


@pytest.mark.parametrize("parse", [parse_chat, octoai_chat], ids=["openai", "octoai"])
@pytest.mark.parametrize(("body", "named"), BAD)
def test_a_misshapen_structure_is_refused_naming_its_field(parse: Any, body: JSON, named: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse(body)
    assert err.value.param == named and f"'{named}'" in err.value.message


@pytest.mark.parametrize(
    "body",
    [
        chat({"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}}),
        chat({"type": "image_url", "image_url": "http://x/y.png"}),  # vLLM's short form
        chat({"type": "video_url", "video_url": {"url": "http://x/v.mp4"}}),  # vLLM's own parts
        chat({"type": "image_embeds", "image_embeds": "..."}),
        chat({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}),
        chat({"type": "file", "file": {"file_data": "x", "filename": "a.pdf"}}),
        chat({"type": "audio_url", "audio_url": {"url": "http://x/a.wav"}}),
        chat({"type": "text", "text": "a"}, {"type": "refusal", "refusal": "no"}, role="assistant"),
        chat(
            {"type": "text", "text": "a"}, tools=[TOOL, {"type": "custom", "custom": {"name": "g"}}], tool_choice="auto"
        ),
        chat({"type": "text", "text": "a"}, tools=[TOOL], tool_choice={"type": "function", "function": {"name": "f"}}),
    ],
)
def test_well_shaped_and_servers_own_parts_are_taken(body: JSON) -> None:
    assert parse_chat(body).messages[0].content == tuple(body["messages"][0]["content"])


NOT_STRINGS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.lists(st.text(), max_size=2),
    st.dictionaries(st.text(), st.text(), max_size=2),
)


@given(st.sampled_from(["text", "refusal"]), NOT_STRINGS, st.integers(0, 3))
def test_any_non_string_in_a_text_field_is_refused(kind: str, value: JSON, before: int) -> None:
    parts = [{"type": "text", "text": "ok"}] * before + [{"type": kind, kind: value}]
    with pytest.raises(InvalidRequest) as err:
        parse_chat(chat(*parts, role="assistant"))
    assert err.value.param == f"messages[0].content[{before}].{kind}"


# A ``type`` is looked up (content parts, tools, calls): a list or an object there reached the token
# estimate's set lookup and was answered 500 (found by a fuzzer mutating nested fields).
NOT_NAMES = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.lists(st.text(max_size=4), max_size=2),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
)
CHAT_PARSERS = {
    "openai": parse_chat,
    "octoai": octoai_chat,
    "friendli": lambda body: friendli_chat(body, "serverless"),
    "sgp": sgp_chat,
}


def typed_where(where: str, kind: JSON) -> tuple[JSON, str]:
    """A chat body whose ``type`` at ``where`` is ``kind``, and that field's path."""
    if where == "part":
        return chat({"type": "text", "text": "a"}, {"type": kind, "text": "b"}), "messages[0].content[1].type"
    if where == "tool":
        return chat({"type": "text", "text": "a"}, tools=[TOOL, {**TOOL, "type": kind}]), "tools[1].type"
    if where == "choice":
        return chat({"type": "text", "text": "a"}, tools=[TOOL], tool_choice={"type": kind}), "tool_choice.type"
    call = {"id": "c", "type": kind, "function": {"name": "f", "arguments": "{}"}}
    body = {"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [call]}]}
    return body, "messages[1].tool_calls[0].type"


@given(st.sampled_from(sorted(CHAT_PARSERS)), st.sampled_from(["part", "tool", "call", "choice"]), NOT_NAMES)
def test_a_type_that_is_not_a_string_is_refused_naming_it(dialect: str, where: str, kind: JSON) -> None:
    body, named = typed_where(where, kind)
    with pytest.raises(InvalidRequest) as err:
        CHAT_PARSERS[dialect](body)
    assert err.value.param == named and f"'{named}'" in err.value.message


# A part of no type a target takes was passed on, and answered 200 by a server that read it as nothing;
# OpenAI's API refuses it (400, param ``messages[0].content[0].type``).
UNTYPED = [
    ({"type": "bogus"}, "messages[0].content[0].type", "must be one of 'text', 'image_url', "),
    ({}, "messages[0].content[0].type", "is required"),
    ({"text": "a"}, "messages[0].content[0].type", "is required"),
    ({"type": "refusal", "refusal": "no"}, "messages[0].content[0].type", "must be one of 'text', "),
    ({"type": "image_pil"}, "messages[0].content[0].type", "must be one of"),
]


@pytest.mark.parametrize("dialect", sorted(CHAT_PARSERS))
@pytest.mark.parametrize(("part", "named", "said"), UNTYPED)
def test_a_part_of_no_type_a_target_takes_is_refused_naming_it(dialect: str, part: JSON, named: str, said: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        CHAT_PARSERS[dialect](chat(part))
    assert err.value.param == named
    assert err.value.message.startswith(f"'{named}' {said}")
    assert "'refusal'" not in err.value.message  # an assistant's alone: not offered to a user

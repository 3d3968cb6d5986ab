"""A refused feature's ``param`` is the field alone, as a client's SDK reads it (OpenAI's
``BadRequestError.param``); why it is refused goes in the message. Parsers record a native feature as
``field (why)``: the class this test closes is a reason leaking into ``param``."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.core.errors import UnsupportedFeature, split_field
from gateway.core.request import Operation
from gateway.dialects.anthropic.parse import parse as parse_messages
from gateway.dialects.responses import RESPONSES
from gateway.routing.capabilities import fit

# a JSON path the way the parsers write it: names, dots and indices
FIELD = re.compile(r"^[A-Za-z_][\w-]*(\[\d+\])*(\.[A-Za-z_][\w-]*(\[\d+\])*)*$")

RESPONSES_BODIES: list[dict[str, Any]] = [
    {"tools": [{"type": "web_search"}]},
    {"input": [{"type": "item_reference", "id": "msg_1"}]},
    {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
    {"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
    {"include": ["reasoning.encrypted_content"]},
    {"tool_choice": {"type": "web_search"}},
    {"top_logprobs": 2},
    {"text": {"verbosity": "low"}},
]

MESSAGES_BODIES: list[dict[str, Any]] = [
    {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    {"container": "c"},
    {"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "citations": [{"type": "x"}]}]}]},
]


def refused(request: Any) -> UnsupportedFeature:
    with pytest.raises(UnsupportedFeature) as caught:
        fit(request, "vllm:m", frozenset(), ())
    return caught.value


@pytest.mark.parametrize("extra", RESPONSES_BODIES)
def test_a_responses_refusal_names_the_field_alone(extra: dict[str, Any]) -> None:
    request = RESPONSES.parse(Operation.CHAT, {"model": "m", "input": "x", **extra}, "")
    error = refused(request)
    assert error.param is not None and FIELD.match(error.param), error.param
    assert f"'{error.param}' is not supported by target 'vllm:m'" in error.message
    assert "OpenAI" in error.message  # the why survives, in the message


@pytest.mark.parametrize("extra", MESSAGES_BODIES)
def test_a_messages_refusal_names_the_field_alone(extra: dict[str, Any]) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], **extra}
    error = refused(parse_messages(body))
    assert error.param is not None and FIELD.match(error.param), error.param
    assert f"'{error.param}' is not supported by target 'vllm:m': " in error.message


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("top_k", ("top_k", "")),
        ("tools[0] (server tool 'x', run only by Anthropic)", ("tools[0]", "server tool 'x', run only by Anthropic")),
        ("include (a (nested) why)", ("include", "a (nested) why")),
        ("a (no closing", ("a (no closing", "")),
        ("anthropic-beta b1", ("anthropic-beta b1", "")),
    ],
)
def test_split_field(name: str, split: tuple[str, str]) -> None:
    assert split_field(name) == split
    assert split_field(name, "given") == (split[0], "given")  # a reason given outright wins

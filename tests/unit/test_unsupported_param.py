"""A refused feature's ``param`` is the field alone, as a client's SDK reads it (OpenAI's
``BadRequestError.param``); why it is refused goes in the message. Parsers record a feature's field and
its why apart (``FeatureSet.use``): the class this test closes is a reason leaking into ``param``."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.core.errors import UnsupportedFeature
from gateway.core.request import Feature, Operation
from gateway.dialects.anthropic.parse import parse as parse_messages
from gateway.dialects.common import FeatureSet, request_of
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


def test_the_first_field_of_a_feature_names_it_with_its_own_why() -> None:
    fs = FeatureSet()
    fs.use(Feature.ANTHROPIC_NATIVE, "container", why="Anthropic's code execution")
    fs.use(Feature.ANTHROPIC_NATIVE, "tools[0]", why="a server tool")
    fs.use(Feature.TOP_K, "top_k")
    request = request_of(fs, Operation.CHAT, "m")
    error = refused(request)
    assert (error.param, error.message) == (
        "container",
        "'container' is not supported by target 'vllm:m': Anthropic's code execution",
    )
    assert request.field_reason(Feature.TOP_K) == ""


def test_a_chained_responses_refusal_names_previous_response_id() -> None:
    from gateway.dialects.responses.parse import with_history

    request = RESPONSES.parse(Operation.CHAT, {"model": "m", "input": "x"}, "")
    error = refused(with_history(request, [{"type": "web_search_call", "id": "ws_1"}], "openai"))
    assert error.param == "previous_response_id" and "'web_search_call' items" in error.message

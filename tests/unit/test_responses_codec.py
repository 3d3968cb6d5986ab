"""The Responses codec without sockets: a stream's events in order for reasoning, text and a tool call,
and its final response equal to the whole answer rendered from the same events; input items to chat
messages; unknown items refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.errors import InvalidRequest
from gateway.core.request import Feature, Operation
from gateway.core.response import Accumulator, Delta, Finish, StreamEvent, StreamStart, Usage, UsageReport
from gateway.dialects.responses import RESPONSES
from gateway.dialects.responses.parse import normalize, to_messages
from gateway.dialects.responses.render import EventEncoder

JSON = Any
CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
EVENTS: list[StreamEvent] = [
    StreamStart("chatcmpl-1", 1, "m"),
    Delta(0, reasoning="think"),
    Delta(0, reasoning="ing"),
    Delta(0, text="Hello"),
    Delta(0, text=" there"),
    Delta(0, tool_calls=(CALL,)),
    Delta(0, tool_calls=({"index": 0, "function": {"arguments": '{"a":'}},)),
    Delta(0, tool_calls=({"index": 0, "function": {"arguments": "1}"}},)),
    Finish(0, "tool_calls"),
    UsageReport(Usage(7, 5, 2, 3)),
]


def request() -> Any:
    return RESPONSES.parse(None, {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}]}, "")  # type: ignore[arg-type]


def decoded(raw: bytes) -> list[JSON]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            kind, data = block.split("\n")
            event = json.loads(data[6:])
            assert kind == "event: " + event["type"]
            out.append(event)
    return out


def without_ids(value: JSON) -> JSON:
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items() if k not in ("id", "item_id")}
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


def test_stream_events_in_order_and_final_equals_whole() -> None:
    req = request()
    encoder = EventEncoder(req)
    events = decoded(b"".join(encoder.event(ev) for ev in EVENTS) + encoder.end())
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # reasoning
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added",  # message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # function call
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][2]["arguments"] == '{"a":1}' and final["output"][2]["call_id"] == "call_1"
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1, 2]
    usage = final["usage"]
    assert (
        usage["input_tokens_details"] == {"cached_tokens": 2}
        and usage["output_tokens_details"]["reasoning_tokens"] == 3
    )
    # the whole answer rendered from the same events, accumulated (its tool call in three fragments)
    whole = RESPONSES.render(req, Accumulator().extend(EVENTS).completion())
    assert without_ids(whole) == without_ids(final)


def test_a_stream_cut_by_length_is_incomplete() -> None:
    encoder = EventEncoder(request())
    raw = b"".join(encoder.event(ev) for ev in [StreamStart("c", 1, "m"), Delta(0, text="a"), Finish(0, "length")])
    last = decoded(raw + encoder.end())[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["status"] == "incomplete"


def test_items_to_messages() -> None:
    items = normalize(
        [
            {"role": "developer", "content": "rules"},
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "u"}],
            },
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
            {"type": "reasoning", "summary": []},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
        ]
    )
    messages = to_messages(items)
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[1].content == ({"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}})
    assert messages[2].content == "calling" and [c["id"] for c in messages[2].tool_calls or ()] == ["c1", "c2"]
    assert messages[3].tool_call_id == "c1" and messages[3].content == "one"
    assert all(item["id"] for item in items)


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"role": "tool", "content": "x"}, "input[0].role"),
        ({"type": "function_call", "name": "f", "arguments": "{}"}, "input[0].call_id"),
        ({"type": 3}, "input[0].type"),
        ({"role": "user", "content": [{"text": "no type"}]}, "input[0].content[0].type"),
        ({"role": "user", "content": [{"type": ["input_text"], "text": "x"}]}, "input[0].content[0].type"),
        # a tool output's parts are checked one by one: the name is the part's own index, not 0
        (
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "a"}, {}]},
            "input[0].output[1].type",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}, {"type": []}]},
            "input[0].output[1].type",
        ),
    ],
)
def test_wrong_items_are_refused_by_name(item: JSON, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        normalize([item])
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"type": "computer_call", "id": "x"}, "input[0].type"),
        ({"type": "item_reference", "id": "x"}, "input[0].type"),
        ({"role": "user", "content": [{"type": "input_audio"}]}, "input[0].content[0].type"),
        ({"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}, "input[0].content[0].type"),
        ({"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}, "input[0].content[0].type"),
    ],
)
def test_what_only_openai_serves_is_kept_as_it_came_and_named(item: JSON, field: str) -> None:
    """Not refused here: the request goes to an OpenAI target's /v1/responses as it came, and any
    other target refuses it by this name (``Feature.RESPONSES_NATIVE``)."""
    native: list[tuple[str, str]] = []
    (kept,) = normalize([item], native)
    assert all(kept[k] == v for k, v in item.items())
    ((named, why),) = native
    assert named == field and "only by OpenAI" in why
    request = RESPONSES.parse(Operation.CHAT, {"model": "m", "input": [item]}, "")
    assert Feature.RESPONSES_NATIVE in request.features and request.field_name(Feature.RESPONSES_NATIVE) == named
    assert request.field_reason(Feature.RESPONSES_NATIVE) == why
    assert request.native is not None and request.native["input"] == [item]  # untouched


def test_an_empty_include_asks_for_nothing_only_openai_serves() -> None:
    """The Agents SDK sends ``include: []``: nothing asked, so every target serves it."""
    request = RESPONSES.parse(Operation.CHAT, {"model": "m", "input": "x", "include": []}, "")
    assert Feature.RESPONSES_NATIVE not in request.features
    request = RESPONSES.parse(Operation.CHAT, {"model": "m", "input": "x", "include": ["x"]}, "")
    assert request.field_name(Feature.RESPONSES_NATIVE) == "include"


def test_a_chain_goes_to_another_upstream_without_what_only_its_maker_knows() -> None:
    from gateway.dialects.responses.egress import portable

    chain = [
        {"type": "message", "id": "msg_g", "status": "completed", "role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_g", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]},
        {"type": "reasoning", "id": "rs_o", "summary": [], "encrypted_content": "opaque"},
        {"type": "function_call", "id": "fc_g", "call_id": "c1", "name": "f", "arguments": "{}", "status": "completed"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    assert portable(chain) == [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_o", "summary": [], "encrypted_content": "opaque"},  # readable without state
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},  # OpenAI's own item, as it came
    ]


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ({"status": "completed", "output": [{"type": "message"}]}, "stop"),
        ({"status": "completed", "output": [{"type": "function_call"}]}, "tool_calls"),
        ({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, "length"),
        ({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}, "content_filter"),
        ({"status": "failed"}, "abort"),
    ],
)
def test_an_upstream_responses_finish_in_the_gateways_words(response: JSON, reason: str) -> None:
    from gateway.dialects.responses.egress import finish_of

    assert finish_of(response) == reason

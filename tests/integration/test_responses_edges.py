"""POST /v1/responses at its edges, as an independent test team found them: a stream that breaks on
any target never ends as ``response.completed``; a streamed answer names the model its whole twin
names; what a client asks for is never dropped unsaid (``tool_choice`` without its tool, an empty
``text.format``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import GatewayFactory, config, faulty_gateway, target
from tests.integration.test_responses import CHAT_KINDS, call, post, scripted_target, scripted_upstream

JSON = Any
BREAKS = ["error_after=2", "reset_after=2"]
FINISHED = {"response.completed", "response.incomplete"}


@pytest.mark.parametrize("kind", CHAT_KINDS)
@pytest.mark.parametrize("fault", BREAKS)
async def test_a_broken_stream_never_ends_as_completed(
    gateway: GatewayFactory, upstream: Any, kind: str, fault: str
) -> None:
    _, gw = await faulty_gateway(gateway, upstream, kind, fault)
    status, streamed = await post(gw, {"model": "m", "input": "hello there", "stream": True})
    assert status == 200, streamed
    types = [e["type"] for e in streamed]
    assert "response.output_text.delta" in types, types  # the break came after the first text
    assert "error" in types and not FINISHED & set(types), types


async def test_a_streamed_answer_names_the_model_its_whole_twin_names(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([{"name": "m", "targets": [scripted_target(server)]}]))
        status, whole = await post(gw, {"model": "m", "input": "hi"})
        assert status == 200, whole
        status, streamed = await post(gw, {"model": "m", "input": "hi", "stream": True})
        assert status == 200, streamed
        models = {e["response"]["model"] for e in streamed if "response" in e}
        assert models == {whole["model"]}, (models, whole["model"])


TOOL = {"type": "function", "name": "weather", "parameters": {"type": "object"}}


@pytest.mark.parametrize("kind", ["openai", "friendli"])
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "weather"}}, "tool_choice.name"),
        ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "other"}}, "tool_choice.name"),
        ({"text": {"format": {}}}, "text.format.type"),
    ],
)
async def test_what_a_client_asks_for_is_never_dropped_unsaid(
    gateway: GatewayFactory, upstream: Any, kind: str, body: JSON, param: str
) -> None:
    """A tool required but not given was dropped on the way to chat, and an empty format read as
    text: the model answered as if neither had been asked for. Now 400, naming the field, on an
    OpenAI target (its own /v1/responses refuses them too) and on a chat one."""
    server = await upstream(kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind)]}]))
    status, err = await post(gw, {"model": "m", "input": "x", **body})
    assert status == 400, err
    assert err["error"]["param"] == param and param in err["error"]["message"], err
    assert server.requests == []
    status, ok = await post(gw, {"model": "m", "input": "x", "tools": [TOOL], "tool_choice": "required"})
    assert status == 200, ok


async def test_a_stored_response_asked_for_as_a_stream_is_refused_by_name(gateway: GatewayFactory) -> None:
    """The openai SDK's ``responses.retrieve(id, stream=True)`` got the JSON object, read it as a
    stream, and ended with no event and no error."""
    async with scripted_upstream() as server:
        gw = await gateway(config([{"name": "m", "targets": [scripted_target(server)]}]))
        status, first = await post(gw, {"model": "m", "input": "one"})
        assert status == 200, first
        status, err = await call(gw, "GET", f"/v1/responses/{first['id']}?stream=true")
        assert status == 400 and err["error"]["param"] == "stream", err
        status, got = await call(gw, "GET", f"/v1/responses/{first['id']}?stream=false")
        assert status == 200 and got == first


IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
TOOL_RETURNED_AN_IMAGE: JSON = [
    {"role": "user", "content": "Draw it"},
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "here"}, IMAGE]},
]


async def test_a_tool_output_image_goes_to_openai_and_is_refused_by_name_elsewhere(
    gateway: GatewayFactory, upstream: Any
) -> None:
    """OpenAI takes images and files in a function call's output (an Agents SDK tool returning
    ``ToolOutputImage`` sends one); the gateway refused them with a 400 even on an OpenAI target.
    A chat tool message holds text only: elsewhere they are refused by name, this turn's and a
    stored chain's alike, never sent without them."""
    remote, chat = await upstream("openai"), await upstream("friendli")
    models = [
        {"name": "o", "targets": [target(remote, "openai")]},
        {"name": "c", "targets": [target(chat, "friendli")]},
    ]
    gw = await gateway(config(models))
    body = {"input": TOOL_RETURNED_AN_IMAGE, "tools": [TOOL]}
    status, first = await post(gw, {"model": "o", **body})
    assert status == 200, first
    assert remote.requests[-1].body["input"] == TOOL_RETURNED_AN_IMAGE  # as it came
    status, err = await post(gw, {"model": "c", **body})
    assert status == 400 and err["error"]["param"] == "input[2].output[1].type", err
    status, err = await post(gw, {"model": "c", "input": "next", "previous_response_id": first["id"]})
    assert status == 400 and err["error"]["param"] == "previous_response_id", err
    assert "input_image" in err["error"]["message"] and chat.requests == []

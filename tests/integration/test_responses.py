"""POST /v1/responses over real sockets: every chat target through translation (the same words and
usage as a chat request to it), typed stream events in order, tool calls and their round trip, the
stored chain (previous_response_id, retrieve, delete, input_items, team scope, store: false), Redis
outages, two gateways on one Redis, and the refusals by name."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from gateway.runtime.config import GatewayConfig, hash_key, parse_config
from tests.fakes import scripted
from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import KEY
from tests.redis_servers import RedisServer

JSON = Any
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT_KINDS = [k for k in fake.KINDS if k != "friendli2024"]
NATIVE_KINDS = ("openai", "vllm")  # served on their own /v1/responses (the others through chat)
OTHER_KEY = "gw-key-other-team-0123"
OTHER = {"Authorization": f"Bearer {OTHER_KEY}"}


def two_teams(models: list[JSON], **extra: JSON) -> GatewayConfig:
    teams = [
        {"id": "team1", "keys": [{"id": "k1", "sha256": hash_key(KEY)}]},
        {"id": "team2", "keys": [{"id": "k2", "sha256": hash_key(OTHER_KEY)}]},
    ]
    return parse_config({"models": models, "teams": teams, **extra})


@contextlib.asynccontextmanager
async def scripted_upstream() -> AsyncIterator[TestServer]:
    server = TestServer(scripted.create_app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


def scripted_target(server: TestServer) -> dict[str, JSON]:
    return {
        "provider": "openai",
        "base_url": str(server.make_url("/v1")),
        "model": "up",
        "api_key_env": "TEST_UPSTREAM_KEY",
    }


async def post(gw: Any, body: JSON, path: str = "/v1/responses", headers: JSON = None) -> tuple[int, JSON]:
    data = io.BytesIO(json.dumps(body).encode())  # a large body from a buffer, not the loop's own bytes
    headers = {"Content-Type": "application/json", **(headers or AUTH)}
    async with gw.session.post(gw.url + path, data=data, headers=headers) as resp:
        raw = await resp.read()
        if resp.content_type == "text/event-stream":
            return resp.status, events(raw)
        return resp.status, json.loads(raw)


async def call(gw: Any, method: str, path: str, headers: JSON = None) -> tuple[int, JSON]:
    async with gw.session.request(method, gw.url + path, headers=headers or AUTH) as resp:
        return resp.status, json.loads(await resp.read())


def events(raw: bytes) -> list[JSON]:
    """A Responses stream's events, each checked to name its type in its ``event:`` line."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        event = json.loads(lines[1][6:])
        assert event["type"] == lines[0][7:]
        out.append(event)
    return out


def text_of(response: JSON) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


@pytest.mark.parametrize("kind", CHAT_KINDS)
async def test_every_chat_target_whole_and_streamed(gateway: GatewayFactory, upstream: Any, kind: str) -> None:
    server = await upstream(kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind)]}]))
    chat_body = {"model": "m", "messages": [{"role": "user", "content": "Say it"}], "max_tokens": 4}
    status, chat = await post(gw, chat_body, "/v1/chat/completions")
    assert status == 200, chat
    expected = chat["choices"][0]["message"]["content"]
    body = {"model": "m", "input": "Say it", "max_output_tokens": 4}
    status, whole = await post(gw, body)
    assert status == 200, whole
    assert whole["object"] == "response" and whole["id"].startswith("resp_")
    assert text_of(whole) == expected
    assert whole["status"] == "incomplete" and whole["incomplete_details"] == {"reason": "max_output_tokens"}
    assert whole["usage"]["output_tokens"] == chat["usage"]["completion_tokens"]
    assert whole["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]
    assert whole["usage"]["total_tokens"] == whole["usage"]["input_tokens"] + whole["usage"]["output_tokens"]
    sent = server.requests[-1]
    if kind in NATIVE_KINDS:  # the upstream's own /v1/responses, the body as the client sent it
        assert sent.path == "/v1/responses" and sent.body == {**body, "model": "up-model"}
    else:
        (message,) = sent.body["messages"]
        assert message["role"] == "user" and "Say it" in json.dumps(message["content"])
    status, streamed = await post(gw, {**body, "stream": True})
    assert status == 200, streamed
    types = [e["type"] for e in streamed]
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    deltas = [e["delta"] for e in streamed if e["type"] == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == expected  # token by token, not one buffered answer
    final = streamed[-1]["response"]
    assert text_of(final) == expected and final["usage"] == whole["usage"]


async def test_function_call_round_trip_whole_and_streamed(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([{"name": "m", "targets": [scripted_target(server)]}]))
        tool = {"type": "function", "name": "weather", "parameters": {"type": "object"}}
        body = {"model": "m", "input": "Weather? [[tool:weather]]", "tools": [tool]}
        status, first = await post(gw, body)
        assert status == 200, first
        (fc,) = first["output"]
        assert fc["type"] == "function_call" and fc["name"] == "weather"
        assert fc["arguments"] == scripted.ARGUMENTS and fc["call_id"] == "call_scripted"
        sent = server.app[scripted.REQUESTS][-1]
        assert sent["tools"] == [
            {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
        ]
        status, streamed = await post(gw, {**body, "stream": True})
        assert status == 200, streamed
        types = [e["type"] for e in streamed]
        assert "response.function_call_arguments.delta" in types
        done = next(e for e in streamed if e["type"] == "response.function_call_arguments.done")
        assert done["arguments"] == scripted.ARGUMENTS and done["name"] == "weather"
        assert streamed[-1]["type"] == "response.completed"
        assert streamed[-1]["response"]["output"][0]["arguments"] == scripted.ARGUMENTS
        # the round trip: the call's output goes back, chained to the first response
        follow = {
            "model": "m",
            "previous_response_id": first["id"],
            "input": [{"type": "function_call_output", "call_id": fc["call_id"], "output": "sunny"}],
            "tools": [tool],
        }
        status, second = await post(gw, follow)
        assert status == 200, second
        assert text_of(second) == "the tool said: sunny"
        messages = server.app[scripted.REQUESTS][-1]["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
        assert messages[1]["tool_calls"][0]["function"]["name"] == "weather"
        assert messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "call_scripted"}


async def test_chain_retrieve_delete_input_items_and_team_scope(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(two_teams([{"name": "m", "targets": [scripted_target(server)]}]))
        status, first = await post(gw, {"model": "m", "input": "one", "instructions": "be brief"})
        assert status == 200 and first["instructions"] == "be brief"
        status, second = await post(gw, {"model": "m", "input": "two", "previous_response_id": first["id"]})
        assert status == 200, second
        messages = server.app[scripted.REQUESTS][-1]["messages"]
        # instructions are not carried over from the previous response (as OpenAI)
        assert messages == [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "echo: one"},
            {"role": "user", "content": "two"},
        ]
        status, got = await call(gw, "GET", f"/v1/responses/{second['id']}")
        assert status == 200 and got == second
        status, items = await call(gw, "GET", f"/v1/responses/{second['id']}/input_items")
        assert status == 200 and [i["content"][0]["text"] for i in items["data"]] == ["two"]
        assert items["has_more"] is False and items["first_id"] == items["data"][0]["id"]
        status, err = await call(gw, "GET", f"/v1/responses/{second['id']}", OTHER)
        assert status == 404 and err["error"]["type"] == "not_found_error", err
        for path in (f"/v1/responses/{second['id']}/input_items",):
            assert (await call(gw, "GET", path, OTHER))[0] == 404
        assert (await call(gw, "DELETE", f"/v1/responses/{second['id']}", OTHER))[0] == 404
        status, err = await post(gw, {"model": "m", "input": "x", "previous_response_id": second["id"]}, headers=OTHER)
        assert status == 404 and err["error"]["param"] == "previous_response_id"
        status, gone = await call(gw, "DELETE", f"/v1/responses/{second['id']}")
        assert status == 200 and gone == {"id": second["id"], "object": "response", "deleted": True}
        status, _ = await call(gw, "GET", f"/v1/responses/{second['id']}")
        assert status == 404
        status, unstored = await post(gw, {"model": "m", "input": "x", "store": False})
        assert status == 200 and unstored["store"] is False
        status, _ = await call(gw, "GET", f"/v1/responses/{unstored['id']}")
        assert status == 404


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"unknown_field": 1}, "unknown_field"),
    ],
)
async def test_unmodelled_features_refused_by_name(
    gateway: GatewayFactory, upstream: Any, body: JSON, param: str
) -> None:
    """Refused before any upstream is called, naming the field: by the gateway itself (background,
    conversation, a bad schema, an unknown field), or, for what only OpenAI's own /v1/responses
    serves (hosted tools, its item and part types, include), by every target that is not OpenAI
    (an OpenAI target takes it as it came: ``test_responses_native.py``)."""
    server = await upstream("vllm")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    status, err = await post(gw, {"model": "m", "input": "x", **body})
    assert status == 400, err
    assert err["error"]["param"].startswith(param), err
    assert err["error"]["param"] in err["error"]["message"], err
    assert server.requests == []


async def test_store_outage_is_a_named_503(gateway: GatewayFactory, own_redis: RedisServer) -> None:
    async with scripted_upstream() as server:
        cfg = config([{"name": "m", "targets": [scripted_target(server)]}], redis={"url": own_redis.url})
        gw = await gateway(cfg)
        status, first = await post(gw, {"model": "m", "input": "one"})
        assert status == 200, first
        own_redis.stop()
        status, err = await post(gw, {"model": "m", "input": "two", "previous_response_id": first["id"]})
        assert status == 503, err
        assert err["error"]["code"] == "store_unavailable" and err["error"]["param"] == "previous_response_id"
        status, err = await call(gw, "GET", f"/v1/responses/{first['id']}")
        assert status == 503 and err["error"]["code"] == "store_unavailable"


async def test_two_gateways_share_one_redis_and_a_restart_keeps_it(
    gateway: GatewayFactory, own_redis: RedisServer
) -> None:
    async with scripted_upstream() as server:
        cfg = config([{"name": "m", "targets": [scripted_target(server)]}], redis={"url": own_redis.url})
        one, two = await gateway(cfg), await gateway(cfg)
        status, first = await post(one, {"model": "m", "input": "one"})
        assert status == 200, first
        status, second = await post(two, {"model": "m", "input": "two", "previous_response_id": first["id"]})
        assert status == 200, second
        assert len(server.app[scripted.REQUESTS][-1]["messages"]) == 3
        await one.server.close()  # a gateway process gone; a new one on the same Redis still has it
        three = await gateway(cfg)
        status, got = await call(three, "GET", f"/v1/responses/{second['id']}")
        assert status == 200 and got["id"] == second["id"]


async def test_team_size_cap_drops_the_oldest(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        cfg = config([{"name": "m", "targets": [scripted_target(server)]}], responses={"max_bytes_per_team": 6000})
        gw = await gateway(cfg)
        ids = []
        for i in range(6):
            status, answer = await post(gw, {"model": "m", "input": f"turn {i} " + "x" * 400})
            assert status == 200
            ids.append(answer["id"])
        found = [(await call(gw, "GET", f"/v1/responses/{rid}"))[0] for rid in ids]
        assert found[-1] == 200 and found[0] == 404, found
        assert found == sorted(found, reverse=True)  # the oldest went first


async def test_input_item_caps(gateway: GatewayFactory) -> None:
    async with scripted_upstream() as server:
        gw = await gateway(config([{"name": "m", "targets": [scripted_target(server)]}]))
        item = {"role": "user", "content": "x"}
        status, err = await post(gw, {"model": "m", "input": [item] * 100_000})
        assert status == 413 and "JSON values" in err["error"]["message"], err  # refused before parsing
        status, err = await post(gw, {"model": "m", "input": [item] * 3_000})
        assert status == 400 and err["error"]["param"] == "input", err  # past the 2,048 items of a list
        status, ok = await post(gw, {"model": "m", "input": [item] * 2_048})
        assert status == 200, ok
        assert len(server.app[scripted.REQUESTS]) == 1

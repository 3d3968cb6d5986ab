"""POST /v1/responses to a target's own /v1/responses, over real sockets (the fake upstream's
``/v1/responses`` on OpenAI's wire): OpenAI's hosted tools, item types and fields the gateway does
not model go as they came and come back as they came, whole and streamed event by event; the same
body refused by name by every other target (and passed over where a route has an OpenAI target);
usage accounted (spend); the chain kept team by team with OpenAI's state used where OpenAI made it;
an upstream's stream error ends the relayed stream with a numbered ``error`` event; a vLLM replica
without the route turns to chat after one 404."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.runtime.config import hash_key, parse_config
from tests.fakes.front import front
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import KEY
from tests.integration.test_responses import OTHER, call, post, two_teams
from tests.support.waiting import eventually

JSON = Any
ADMIN = "admin-key-for-native-responses"
# What only OpenAI serves, all at once: a hosted tool, an item of its hosted tools, a reference, a
# reasoning item, a file part, its include list and its own knobs.
OPENAI_ONLY: JSON = {
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Find the tide times"}]},
        {"type": "item_reference", "id": "msg_earlier"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]},
        {"type": "some_future_item", "payload": {"kept": [1, 2, 3]}},
    ],
    "tools": [{"type": "web_search"}, {"type": "function", "name": "tides", "parameters": {"type": "object"}}],
    "include": ["web_search_call.action.sources", "reasoning.encrypted_content"],
    "max_tool_calls": 2,
    "context_management": [{"type": "compaction"}],
    "prompt_cache_retention": "24h",
    "moderation": {"model": "omni-moderation-latest"},
    "text": {"verbosity": "low"},
    "metadata": {"trace": "t-1"},
    "max_output_tokens": 6,
}


async def test_openai_targets_take_the_body_as_it_came_and_answer_as_they_answered(
    gateway: GatewayFactory, upstream: Any
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    body = {"model": "m", **OPENAI_ONLY}
    status, whole = await post(gw, body)
    assert status == 200, whole
    (sent,) = server.requests
    assert sent.path == "/v1/responses" and sent.body == {**body, "model": "up-model"}  # untouched
    assert [item["type"] for item in whole["output"]] == ["web_search_call", "function_call"]
    assert whole["id"].startswith("resp_") and whole["max_tool_calls"] == 2 and whole["metadata"] == {"trace": "t-1"}
    # the gateway kept it (its team's), as OpenAI answered it
    assert await call(gw, "GET", f"/v1/responses/{whole['id']}") == (200, whole)
    assert (await call(gw, "GET", f"/v1/responses/{whole['id']}", OTHER))[0] in (401, 404)


async def test_a_stream_is_relayed_event_by_event_as_the_upstream_wrote_it(
    gateway: GatewayFactory, upstream: Any
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    status, streamed = await post(gw, {"model": "m", **OPENAI_ONLY, "stream": True})
    assert status == 200, streamed
    upstream_events = [json.loads(raw) for raw in server.sent]
    assert streamed == upstream_events  # every event, in order, each as it came
    types = [e["type"] for e in streamed]
    assert "response.web_search_call.searching" in types and "response.function_call_arguments.delta" in types
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))
    # stored as the upstream's last event had it
    final = streamed[-1]["response"]
    assert await call(gw, "GET", f"/v1/responses/{final['id']}") == (200, final)


@pytest.mark.parametrize("kind", ["vllm", "friendli", "anthropic"])
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        ({"include": ["reasoning.encrypted_content"]}, "include"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice.type"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"context_management": [{"type": "compaction"}]}, "context_management"),
        ({"image": {"context_compression": "auto"}}, "image"),
        ({"access_programs": {"cyber": "standard"}}, "access_programs"),
    ],
)
async def test_every_other_target_refuses_it_by_name(
    gateway: GatewayFactory, upstream: Any, kind: str, extra: JSON, named: str
) -> None:
    server = await upstream(kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind)]}]))
    status, err = await post(gw, {"model": "m", "input": "x", **extra})
    assert status == 400, err
    # param is the field alone, as OpenAI's SDK reads it; the message names it and says why
    assert err["error"]["param"] == named, err
    assert f"'{err['error']['param']}'" in err["error"]["message"] and "OpenAI" in err["error"]["message"], err
    assert server.requests == []


async def test_a_route_passes_over_targets_that_cannot_serve_it(gateway: GatewayFactory, upstream: Any) -> None:
    local, remote = await upstream("vllm"), await upstream("openai")
    targets = [target(local, "vllm", weight=1e6, name="local"), target(remote, "openai", weight=1e-6, name="remote")]
    gw = await gateway(config([{"name": "m", "targets": targets}]))
    status, whole = await post(gw, {"model": "m", "input": "x", "tools": [{"type": "web_search"}]})
    assert status == 200 and whole["output"][0]["type"] == "web_search_call", whole
    assert local.requests == [] and len(remote.requests) == 1
    status, plain = await post(gw, {"model": "m", "input": "x"})  # the rest still go to the first
    assert status == 200 and len(local.requests) == 1, plain


async def test_usage_is_accounted_as_the_upstream_reported_it(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai")
    data = {
        "models": [{"name": "m", "targets": [target(server, "openai", name="up")]}],
        "teams": [
            {"id": "t", "keys": [{"id": "k1", "sha256": hash_key(KEY)}], "budget": {"amount": 1, "period": "day"}}
        ],
        "spend": {"prices": [{"model": "m", "input": 3, "output": 7}]},
        "admin": {"key_sha256": hash_key(ADMIN)},
    }
    gw = await gateway(parse_config(data))
    usages = []
    for stream in (False, True):
        status, got = await post(gw, {"model": "m", **OPENAI_ONLY, "stream": stream})
        assert status == 200, got
        usages.append((got[-1]["response"] if stream else got)["usage"])
    want = sum(u["input_tokens"] * 3 + u["output_tokens"] * 7 for u in usages)
    admin = {"Authorization": f"Bearer {ADMIN}"}

    async def reported() -> Any:
        async with gw.session.get(gw.url + "/admin/spend?group_by=model&period=day", headers=admin) as resp:
            rows = (await resp.json())["rows"]
        return rows if rows and rows[0]["spend_micros"] == want else None

    await eventually(reported, "both answers settled at the upstream's usage")


async def test_a_chain_openai_made_goes_to_it_by_id_and_others_are_rebuilt(
    gateway: GatewayFactory, upstream: Any
) -> None:
    remote, chat = await upstream("openai"), await upstream("friendli")
    models = [
        {"name": "o", "targets": [target(remote, "openai")]},
        {"name": "c", "targets": [target(chat, "friendli")]},
    ]
    gw = await gateway(two_teams(models))
    status, first = await post(gw, {"model": "o", "input": "first words"})
    assert status == 200, first
    # OpenAI made it: the next turn names it to OpenAI (its state), with this turn's input alone
    status, second = await post(gw, {"model": "o", "input": "second words", "previous_response_id": first["id"]})
    assert status == 200, second
    assert remote.requests[-1].body["previous_response_id"] == first["id"]
    assert remote.requests[-1].body["input"] == "second words"
    # another team cannot chain on it: the gateway's 404, OpenAI not asked
    asked = len(remote.requests)
    body = {"model": "o", "input": "x", "previous_response_id": first["id"]}
    status, err = await post(gw, body, headers=OTHER)
    assert status == 404 and err["error"]["param"] == "previous_response_id", err
    assert len(remote.requests) == asked
    # a chain a chat target made goes to OpenAI rebuilt, without the gateway's ids
    status, third = await post(gw, {"model": "c", "input": "chat turn"})
    assert status == 200, third
    status, fourth = await post(gw, {"model": "o", "input": "back", "previous_response_id": third["id"]})
    assert status == 200, fourth
    sent = remote.requests[-1].body
    assert "previous_response_id" not in sent
    assert [i["type"] for i in sent["input"]] == ["message", "message", "message"]
    assert [i["role"] for i in sent["input"]] == ["user", "assistant", "user"]
    assert all("id" not in i for i in sent["input"][:2]) and sent["input"][-1]["content"] == "back"
    # and OpenAI's own chain, to a chat target, is rebuilt from the gateway's store
    status, fifth = await post(gw, {"model": "c", "input": "again", "previous_response_id": second["id"]})
    assert status == 200, fifth
    assert [m["role"] for m in chat.requests[-1].body["messages"]] == ["user", "assistant", "user", "assistant", "user"]


async def test_a_chain_holding_openai_items_is_openai_s_alone(gateway: GatewayFactory, upstream: Any) -> None:
    remote, chat = await upstream("openai"), await upstream("vllm")
    models = [{"name": "o", "targets": [target(remote, "openai")]}, {"name": "v", "targets": [target(chat, "vllm")]}]
    gw = await gateway(config(models))
    status, first = await post(gw, {"model": "o", "input": "search it", "tools": [{"type": "web_search"}]})
    assert status == 200 and first["output"][0]["type"] == "web_search_call", first
    status, err = await post(gw, {"model": "v", "input": "next", "previous_response_id": first["id"]})
    assert status == 400 and err["error"]["param"].startswith("previous_response_id"), err
    assert "web_search_call" in err["error"]["message"] and chat.requests == []


async def test_an_upstream_stream_error_ends_the_relay_with_a_numbered_error_event(
    gateway: GatewayFactory, upstream: Any
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    status, streamed = await post(gw, {"model": "m", "input": "go [[fault:reset_after=2]]", "stream": True})
    assert status == 200
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))
    assert streamed[0]["type"] == "response.created" and streamed[-1]["type"] == "error", streamed
    assert [e["type"] for e in streamed].count("response.output_text.delta") == 2
    assert not any(e["type"] == "response.completed" for e in streamed)
    (error,) = (e for e in streamed if e["type"] == "error")
    assert error["code"] and error["message"]


async def test_a_vllm_replica_without_the_route_turns_to_chat_after_one_404(
    gateway: GatewayFactory, upstream: Any
) -> None:
    replica = await upstream("vllm")
    async with front({"/v1/chat/completions": replica.url.removesuffix("/v1")}) as lacking:
        gw = await gateway(
            config([{"name": "m", "targets": [{**target(replica, "vllm"), "base_url": lacking.url + "/v1"}]}])
        )
        for stream in (False, True, False):
            status, got = await post(gw, {"model": "m", "input": "hello there", "stream": stream})
            assert status == 200, got
        # asked once, then chat from the start (the prober's /v1/models aside)
        assert [p for p in lacking.missing if p != "/v1/models"] == ["/v1/responses"]
        assert [r.path for r in replica.requests] == ["/v1/chat/completions"] * 3
        status, err = await post(gw, {"model": "m", "input": "x", "tools": [{"type": "web_search"}]})
        assert status == 400 and err["error"]["param"].startswith("tools[0].type"), err


async def test_a_vllm_target_gets_the_chain_rebuilt_and_keeps_no_state(gateway: GatewayFactory, upstream: Any) -> None:
    replica = await upstream("vllm")
    gw = await gateway(config([{"name": "m", "targets": [target(replica, "vllm")]}]))
    status, first = await post(gw, {"model": "m", "input": "one"})
    assert status == 200, first
    status, second = await post(gw, {"model": "m", "input": "two", "previous_response_id": first["id"]})
    assert status == 200, second
    sent = replica.requests[-1].body
    assert sent["model"] == "up-model" and "previous_response_id" not in sent
    assert [(i["type"], i["role"]) for i in sent["input"]] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert await call(gw, "GET", f"/v1/responses/{second['id']}") == (200, second)

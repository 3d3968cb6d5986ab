"""Anthropic Messages in: ``/v1/messages`` over real sockets in front of every kind of fake upstream,
whole and streamed, with the exact event order of Anthropic's stream; tools both ways, stop sequences,
the error envelope and its types, ``count_tokens`` and the Anthropic-shaped model list.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import upstream as fake
from tests.integration.conftest import Gateway, GatewayFactory, config, target
from tests.integration.dialect_clients import KEY

JSON = Any
PROMPT = "Say something deterministic"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def events(raw: bytes) -> list[tuple[str, JSON]]:
    """An Anthropic stream as (event name, data) pairs; every event is named and its name repeats its
    data's type."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ") and len(lines) == 2, block
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name
        out.append((name, data))
    return out


def folded(evs: list[tuple[str, JSON]]) -> JSON:
    """What the SDK's accumulator makes of a stream, checking the order it relies on."""
    # one ping: right after message_start when the gateway writes the stream, after the first block's
    # start when an Anthropic upstream's is relayed as it came
    assert [n for n, _ in evs].count("ping") == 1
    evs = [(n, d) for n, d in evs if n != "ping"]
    names = [n for n, _ in evs]
    assert names[0] == "message_start", names
    assert names[-2:] == ["message_delta", "message_stop"], names
    message = evs[0][1]["message"]
    blocks: list[JSON] = []
    open_index = None
    for name, data in evs[1:-2]:
        if name == "content_block_start":
            assert open_index is None and data["index"] == len(blocks)
            open_index = data["index"]
            blocks.append(dict(data["content_block"]) | {"json": ""})
        elif name == "content_block_delta":
            assert data["index"] == open_index
            delta, block = data["delta"], blocks[open_index]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                block["json"] += delta["partial_json"]
        else:
            assert name == "content_block_stop" and data["index"] == open_index
            open_index = None
    assert open_index is None
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = json.loads(b["json"])
        del b["json"]
    delta = evs[-2][1]
    # the SDK's accumulator: message_delta's usage fields update message_start's
    return message | {"content": blocks, **delta["delta"], "usage": message["usage"] | delta["usage"]}


async def post(gw: Gateway, body: JSON, headers: dict[str, str] = HEADERS, path: str = "/v1/messages") -> Any:
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def answer(gw: Gateway, body: JSON, stream: bool) -> JSON:
    status, headers, raw = await post(gw, body | {"stream": stream})
    assert status == 200, raw
    if stream:
        assert headers["Content-Type"].startswith("text/event-stream")
        return folded(events(raw))
    return json.loads(raw)


def body(**fields: JSON) -> JSON:
    return {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": PROMPT}], **fields}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("kind", list(fake.KINDS))
async def test_cell(gateway: GatewayFactory, upstream: Any, kind: str, stream: bool) -> None:
    server = await upstream(kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind)]}]))
    got = await answer(gw, body(system=[{"type": "text", "text": "Be brief."}]), stream)
    sent = server.requests[-1].body
    assert got["type"] == "message" and got["role"] == "assistant"
    text = "".join(fake.tokenize(fake.expected(PROMPT, 4, seed=sent.get("seed"))))
    assert got["content"] == [{"type": "text", "text": text}]
    assert got["stop_reason"] == "max_tokens" and got["stop_sequence"] is None
    usage = got["usage"]
    assert usage["output_tokens"] == 4 and usage["input_tokens"] > 0
    assert usage["cache_read_input_tokens"] == 0 and usage["cache_creation_input_tokens"] == 0
    assert sent.get("max_tokens", sent.get("max_completion_tokens")) == 4  # OpenAI's chat: the latter
    messages = sent.get("messages")
    if kind == "anthropic":  # the client's body went as it came (but the model)
        assert sent["system"] == [{"type": "text", "text": "Be brief."}] and sent["model"] == "up-model"
    elif messages is not None:  # chat wires: the system blocks are the system message
        assert messages[0] == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_tool_round_trip(gateway: GatewayFactory, upstream: Any, stream: bool) -> None:
    server = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    first = await answer(gw, body(max_tokens=50, tools=[WEATHER], tool_choice={"type": "any"}), stream)
    sent = server.requests[-1].body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": WEATHER["input_schema"]}
            | {"description": WEATHER["description"]},
        }
    ]
    assert sent["tool_choice"] == "required"
    assert first["stop_reason"] == "tool_use"
    (call,) = [b for b in first["content"] if b["type"] == "tool_use"]
    assert call["name"] == "get_weather" and set(call["input"]) == {"city"}
    history = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": first["content"]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "sunny", "is_error": False}],
        },
    ]
    second = await answer(gw, body(messages=history, tools=[WEATHER]), stream)
    assert second["stop_reason"] == "max_tokens" and second["content"][0]["type"] == "text"
    sent = server.requests[-1].body["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call["id"]
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == call["input"]
    assert sent[2] == {"role": "tool", "content": "sunny", "tool_call_id": call["id"]}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_stop_sequence_named(gateway: GatewayFactory, upstream: Any, stream: bool) -> None:
    server = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    words = fake.tokenize(fake.expected(PROMPT, 8))
    stop = words[2].strip()
    got = await answer(gw, body(max_tokens=8, stop_sequences=[stop]), stream)
    assert server.requests[-1].body["stop"] == [stop]
    assert got["stop_reason"] == "stop_sequence" and got["stop_sequence"] == stop
    assert stop not in got["content"][0]["text"]


ERRORS = [
    ("[[fault:status=429,retry_after=3]]", 429, "rate_limit_error"),
    ("[[fault:status=400]]", 400, "invalid_request_error"),
    ("[[fault:status=404]]", 404, "not_found_error"),
    ("[[fault:status=500]]", 502, "api_error"),
]


@pytest.mark.parametrize("upstream_kind", list(fake.KINDS))
async def test_upstream_errors_in_envelope(gateway: GatewayFactory, upstream: Any, upstream_kind: str) -> None:
    """Every kind of target's refusals, in Anthropic's envelope with its error types (the matrix's
    error cell for the Messages ingress)."""
    server = await upstream(upstream_kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, upstream_kind)]}]))
    for marker, status, kind in ERRORS:
        got_status, headers, raw = await post(gw, body(messages=[{"role": "user", "content": marker}]))
        assert got_status == status, (marker, raw)
        got = json.loads(raw)
        assert got == {"type": "error", "error": {"type": kind, "message": got["error"]["message"]}}, got
        if status == 429:
            assert headers["Retry-After"] == "3"


async def test_gateway_errors_in_envelope(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    cases = [
        (body(), {**HEADERS, "x-api-key": "wrong"}, 401, "authentication_error"),
        (body(), {**HEADERS, "anthropic-workspace-id": "team2"}, 403, "permission_error"),
        (body(model="nope"), HEADERS, 404, "not_found_error"),
        ({k: v for k, v in body().items() if k != "max_tokens"}, HEADERS, 400, "invalid_request_error"),
        (body(container="c1"), HEADERS, 400, "invalid_request_error"),
        (body(top_k=3), HEADERS, 400, "invalid_request_error"),  # top_k is not OpenAI's... but vLLM's
        (body(), {**HEADERS, "anthropic-beta": "context-1m-2025-08-07"}, 400, "invalid_request_error"),
        (body(tools=[{"type": "web_search_20250305", "name": "web_search"}]), HEADERS, 400, "invalid_request_error"),
    ]
    for req, headers, status, kind in cases:
        got, _, raw = await post(gw, req, headers)
        err = json.loads(raw)
        if req.get("top_k") and got == 200:  # a vLLM target serves top_k: not an error there
            continue
        assert (got, err["type"], err["error"]["type"]) == (status, "error", kind), (req, headers, raw)
    # the message names what was refused
    _, _, raw = await post(gw, body(), {**HEADERS, "anthropic-beta": "context-1m-2025-08-07"})
    assert "context-1m-2025-08-07" in json.loads(raw)["error"]["message"]
    # thinking is advisory: a target with no reasoning control (OpenAI's non-reasoning models) serves
    # the answer without it, and hears nothing of it (tests/integration/test_reasoning_targets.py)
    up = await upstream("openai")
    openai = await gateway(config([{"name": "m", "targets": [target(up, "openai", model="gpt-4o")]}]))
    got, _, raw = await post(openai, body(thinking={"type": "enabled", "budget_tokens": 1024}))
    assert got == 200 and not {"thinking", "reasoning_effort"} & up.requests[-1].body.keys(), raw


async def test_bearer_key_and_honoured_beta(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    headers = {
        "Authorization": f"Bearer {KEY}",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "fine-grained-tool-streaming-2025-05-14",
    }
    status, _, raw = await post(gw, body(), headers)
    assert status == 200, raw
    async with gw.session.get(gw.url + "/metrics") as resp:
        assert 'dialect="anthropic"' in await resp.text()


async def test_a_system_turn_mid_conversation_stays_in_its_place(gateway: GatewayFactory, upstream: Any) -> None:
    """Claude Code sends a ``system`` turn (beta mid-conversation-system-2026-04-07) for a model name it
    does not know: passed as it came to an Anthropic target, a system message in its place on a chat
    wire; a system turn of anything but text is refused naming it."""
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "<reminder>"}, {"type": "text", "text": PROMPT}]},
        {"role": "system", "content": "Agent types: claude"},
        {"role": "assistant", "content": "Sure"},
        {"role": "system", "content": [{"type": "text", "text": "Be"}, {"type": "text", "text": "brief"}]},
        {"role": "user", "content": "go on"},
    ]
    headers = {**HEADERS, "anthropic-beta": "claude-code-20250219,mid-conversation-system-2026-04-07"}
    claude = await upstream("anthropic", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(claude, "anthropic")]}]))
    status, _, raw = await post(gw, body(system="Be kind.", messages=turns), headers)
    assert status == 200, raw
    assert claude.requests[-1].body["messages"] == turns
    assert claude.requests[-1].headers["anthropic-beta"] == "claude-code-20250219,mid-conversation-system-2026-04-07"
    vllm = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(vllm, "vllm")]}]))
    beta = {**HEADERS, "anthropic-beta": "mid-conversation-system-2026-04-07"}
    status, _, raw = await post(gw, body(system="Be kind.", messages=turns), beta)
    assert status == 200, raw
    sent = [(m["role"], m["content"]) for m in vllm.requests[-1].body["messages"]]
    assert sent == [
        ("system", "Be kind."),
        ("user", f"<reminder>\n\n{PROMPT}"),
        ("system", "Agent types: claude"),
        ("assistant", "Sure"),
        ("system", "Be\n\nbrief"),
        ("user", "go on"),
    ]
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    bad = [*turns[:1], {"role": "system", "content": [{"type": "text", "text": "x"}, image]}]
    status, _, raw = await post(gw, body(messages=bad), HEADERS)
    err = json.loads(raw)["error"]
    assert status == 400 and err["type"] == "invalid_request_error", raw
    assert err["message"].startswith("'messages[1].content[1]': a system turn holds only text"), raw


async def test_count_tokens_counts_every_part(gateway: GatewayFactory, upstream: Any) -> None:
    """On a target that cannot count (``openai``): the bound, every part in it (exact counts: test_count_tokens)."""
    server = await upstream("openai", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    path = "/v1/messages/count_tokens"
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    status, _, raw = await post(gw, base, path=path)
    assert status == 200, raw
    small = json.loads(raw)["input_tokens"]
    big_system = base | {"system": "x" * 4000}
    status, _, raw = await post(gw, big_system, path=path)
    assert json.loads(raw)["input_tokens"] >= small + 900
    assert not server.requests  # answered by the gateway alone
    status, _, raw = await post(gw, base, {**HEADERS, "x-api-key": "wrong"}, path=path)
    assert status == 401 and json.loads(raw)["error"]["type"] == "authentication_error"
    status, _, raw = await post(gw, base | {"model": "nope"}, path=path)
    assert status == 404 and json.loads(raw)["error"]["type"] == "not_found_error"


async def test_models_in_anthropic_shape(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    async with gw.session.get(gw.url + "/v1/models", headers=HEADERS) as resp:
        got = await resp.json()
    assert got["has_more"] is False and got["first_id"] == "m"
    assert got["data"][0]["type"] == "model" and got["data"][0]["id"] == "m"
    async with gw.session.get(gw.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}) as resp:
        assert (await resp.json())["object"] == "list"  # OpenAI's shape without anthropic-version
    async with gw.session.get(gw.url + "/v1/models", headers={**HEADERS, "x-api-key": "bad"}) as resp:
        assert resp.status == 401 and (await resp.json())["error"]["type"] == "authentication_error"


async def test_stream_error_after_start_is_an_error_event(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    req = body(max_tokens=8, messages=[{"role": "user", "content": "go [[fault:error_after=2]]"}], stream=True)
    status, _, raw = await post(gw, req)
    assert status == 200
    evs = events(raw)
    assert [n for n, _ in evs[:2]] == ["message_start", "ping"]
    assert evs[-1][0] == "error" and evs[-1][1]["error"]["type"] == "api_error"


# The kinds whose fake writes tool calls in its wire (the others' fakes answer a tool's arguments as text)
TOOL_KINDS = ["vllm", "anthropic"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("upstream_kind", TOOL_KINDS)
async def test_tool_cell(gateway: GatewayFactory, upstream: Any, upstream_kind: str, stream: bool) -> None:
    """A forced tool call comes back as a ``tool_use`` block, whole and streamed (its input reassembled
    from ``input_json_delta``): translated from vLLM's wire, and as it came from Anthropic's (relayed)."""
    server = await upstream(upstream_kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, upstream_kind)]}]))
    got = await answer(gw, body(max_tokens=50, tools=[WEATHER], tool_choice={"type": "any"}), stream)
    assert got["stop_reason"] == "tool_use", got
    (call,) = [b for b in got["content"] if b["type"] == "tool_use"]
    assert call["name"] == "get_weather" and set(call["input"]) == {"city"} and call["id"], got


async def test_every_answer_carries_request_id(gateway: GatewayFactory, upstream: Any) -> None:
    """Anthropic's API puts the request's id in ``request-id`` on every answer, and its SDKs read it
    from there (``message._request_id``, ``APIStatusError.request_id``): whole, streamed, refused,
    counted, listed, and on a path the gateway does not serve. It is the gateway's own id, the one
    ``X-Request-Id`` carries and the log line names."""
    server = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    asks = [
        ("/v1/messages", body(), HEADERS),
        ("/v1/messages", body(stream=True), HEADERS),
        ("/v1/messages", body(max_tokens=0), HEADERS),
        ("/v1/messages", body(), {**HEADERS, "x-api-key": "wrong"}),
        ("/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, HEADERS),
        ("/v1/messages/count_tokens", {"model": "m"}, HEADERS),
        ("/v1/messages/nope", body(), HEADERS),
    ]
    for path, req, headers in asks:
        status, got, raw = await post(gw, req, headers, path)
        got = {k.lower(): v for k, v in got.items()}
        assert got.get("request-id") and got["request-id"] == got["x-request-id"], (path, status, got, raw)
    for path in ("/v1/models", "/v1/models/m", "/v1/models/nope"):
        async with gw.session.get(gw.url + path, headers=HEADERS) as resp:
            assert resp.headers.get("request-id") == resp.headers["X-Request-Id"], (path, resp.status)


PREFILL = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": "The answer is"}]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_prefill_is_continued_or_refused_by_name(gateway: GatewayFactory, upstream: Any, stream: bool) -> None:
    """A final assistant turn is Anthropic's prefill: the answer continues it. vLLM's chat path
    continues it when told (``continue_final_message``; its own /v1/messages does not, 0.32), an
    Anthropic target takes it as it came, and a target that would answer it as a new turn (OpenAI's
    API) refuses it by name: never a new turn in its place."""
    vllm = await upstream("vllm", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(vllm, "vllm")]}]))
    await answer(gw, body(messages=PREFILL), stream)
    sent = vllm.requests[-1]
    assert sent.path.endswith("/chat/completions"), sent.path
    assert sent.body["continue_final_message"] is True and sent.body["add_generation_prompt"] is False
    assert sent.body["messages"][-1] == {"role": "assistant", "content": "The answer is"}
    claude = await upstream("anthropic", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(claude, "anthropic")]}]))
    await answer(gw, body(messages=PREFILL), stream)
    assert claude.requests[-1].body["messages"] == PREFILL
    openai = await upstream("openai", models=("up-model",))
    gw = await gateway(config([{"name": "m", "targets": [target(openai, "openai")]}]))
    status, _, raw = await post(gw, body(messages=PREFILL, stream=stream))
    err = json.loads(raw)["error"]
    assert status == 400 and err["type"] == "invalid_request_error", raw
    assert err["message"].startswith("'messages[1]' is not supported by target 'openai:up-model'"), raw
    assert not openai.requests

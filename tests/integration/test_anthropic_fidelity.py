"""Anthropic to Anthropic is faithful both ways: whatever an Anthropic client sends reaches an Anthropic
target as it came (but the model), and whatever the target answers comes back as it wrote it, whole
and streamed: thinking with its ``signature``, ``redacted_thinking``, server-tool blocks, citations,
block types and keys the gateway does not model. The same content to a target of another wire is
refused naming it, never dropped; but earlier turns' thinking, which only says how the model reasoned
(Anthropic itself strips it from most models' context), is left out there.

The upstream here is a mirror: it answers what the test told it to, in Anthropic's wire, and keeps
each body it got. Hypothesis draws the extra keys and blocks (no floats: their text is not one-to-one).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pydantic_core
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import KEY

JSON = Any
ROOT = Path(__file__).resolve().parents[2]
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}
SDK_PYTHON = ROOT / ".sdk-venvs" / "anthropic" / "bin" / "python"
ANSWER_TIMEOUT = 30.0


class Mirror:
    """An Anthropic upstream that answers ``answer`` (a message) or streams ``events`` (name, data)."""

    def __init__(self) -> None:
        self.answer: JSON = None
        self.events: list[tuple[str, JSON]] = []
        self.bodies: list[JSON] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        self.bodies.append(body)
        if not body.get("stream"):
            return web.Response(body=pydantic_core.to_json(self.answer), content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(self.events))
        await resp.write_eof()
        return resp


def sse(events: list[tuple[str, JSON]]) -> bytes:
    return b"".join(b"event: " + n.encode() + b"\ndata: " + pydantic_core.to_json(d) + b"\n\n" for n, d in events)


@pytest.fixture
async def mirror() -> AsyncIterator[tuple[Mirror, TestServer]]:
    m = Mirror()
    app = web.Application()
    app.router.add_post("/v1/messages", m.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield m, server
    finally:
        await server.close()


def mirror_target(server: TestServer) -> dict[str, JSON]:
    return {"provider": "anthropic", "base_url": str(server.make_url("")), "model": "up", "api_key_env": "X_KEY"}


def exchange(url: str, body: JSON) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=ANSWER_TIMEOUT)
    try:
        conn.request("POST", "/v1/messages", body=json.dumps(body), headers=HEADERS)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# --- what Anthropic sends that the gateway does not model ---------------------------------------

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
extras = st.dictionaries(st.from_regex(r"x_[a-z]{1,6}", fullmatch=True), values, max_size=2)
KNOWN_BLOCKS = [
    {"type": "thinking", "thinking": "let me see", "signature": "EqQBCkYIBxgCKkD"},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [{"type": "web_search_result", "url": "https://e.invalid", "title": "t", "encrypted_content": "x"}],
    },
    {
        "type": "text",
        "text": "cited",
        "citations": [{"type": "web_search_result_location", "url": "https://e.invalid", "cited_text": "c"}],
    },
]
blocks = st.one_of(
    st.sampled_from(KNOWN_BLOCKS),
    st.builds(lambda k, e: {"type": k} | e, st.from_regex(r"x_[a-z]{1,8}", fullmatch=True), extras),
    st.builds(lambda e: {"type": "text", "text": "t"} | e, extras),
)


def message(content: list[JSON], top: JSON) -> JSON:
    usage = {"input_tokens": 5, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "up",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    } | top


def stream_of(content: list[JSON], top: JSON, extra_delta: JSON) -> list[tuple[str, JSON]]:
    start = message([], top) | {"stop_reason": None}
    out: list[tuple[str, JSON]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(content):
        out.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": block}))
        if i == 0:
            out.append(("ping", {"type": "ping"}))
        for delta in deltas(block):
            out.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    end = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
    out.append(("message_delta", end | {"usage": {"output_tokens": 3}} | extra_delta))
    return [*out, ("message_stop", {"type": "message_stop"})]


def deltas(block: JSON) -> list[JSON]:
    if block["type"] == "thinking":
        return [{"type": "thinking_delta", "thinking": "hmm"}, {"type": "signature_delta", "signature": "EqQB"}]
    if block.get("citations"):
        return [{"type": "citations_delta", "citation": block["citations"][0]}, {"type": "text_delta", "text": "!"}]
    if block["type"] == "text":
        return [{"type": "text_delta", "text": "hi"}]
    return [{"type": "x_delta", "x": [1, "two"]}]  # a delta type the gateway does not know


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sent=st.lists(blocks, min_size=1, max_size=3),
    answered=st.lists(blocks, min_size=1, max_size=4),
    top=extras,
    delta=extras,
)
def round_trip(url: str, m: Mirror, sent: list[JSON], answered: list[JSON], top: JSON, delta: JSON) -> None:
    body = {
        "model": "claude",
        "max_tokens": 16,
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": sent},
            {"role": "user", "content": [{"type": "text", "text": "go on"}]},
        ],
    } | top
    m.answer = message(answered, top)
    status, raw = exchange(url, body)
    assert status == 200, raw
    assert raw == pydantic_core.to_json(m.answer)  # the upstream's bytes, as it wrote them
    assert m.bodies[-1] == body | {"model": "up"}  # as the client wrote it, but the model
    m.events = stream_of(answered, top, delta)
    status, raw = exchange(url, body | {"stream": True})
    assert status == 200, raw
    assert raw == sse(m.events)


async def test_anthropic_round_trip_is_faithful(
    gateway: GatewayFactory, mirror: tuple[Mirror, TestServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    m, server = mirror
    monkeypatch.setenv("X_KEY", "up-key")
    gw = await gateway(config([{"name": "claude", "targets": [mirror_target(server)]}]))
    await asyncio.to_thread(round_trip, gw.url, m)


REFUSED = [
    (
        {"role": "assistant", "content": [KNOWN_BLOCKS[3]]},
        "'messages[1].content[0].type' is not supported by target 'openai:up-model': 'web_search_tool_result'",
    ),
    ({"role": "assistant", "content": [KNOWN_BLOCKS[4]]}, "messages[1].content[0].citations"),
    ({"role": "assistant", "content": [{"type": "text", "text": "a", "x_new": 1}]}, "messages[1].content[0].x_new"),
]


@pytest.mark.parametrize(("turn", "named"), REFUSED, ids=[n.split(" ")[0].strip("'") for _, n in REFUSED])
async def test_other_targets_refuse_it_by_name(gateway: GatewayFactory, upstream: Any, turn: JSON, named: str) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    turns = [{"role": "user", "content": "q"}, turn, {"role": "user", "content": "and?"}]  # no prefill
    body = {"model": "m", "max_tokens": 4, "messages": turns}
    status, raw = await asyncio.to_thread(exchange, gw.url, body)
    reply = json.loads(raw)
    assert status == 400 and reply["type"] == "error", raw
    assert reply["error"]["type"] == "invalid_request_error" and named in reply["error"]["message"], raw
    assert not server.requests  # refused before any upstream saw it


@pytest.mark.parametrize("block", KNOWN_BLOCKS[:2], ids=["thinking", "redacted_thinking"])
async def test_other_targets_leave_earlier_thinking_out(gateway: GatewayFactory, upstream: Any, block: JSON) -> None:
    """Signed or redacted, an earlier turn's thinking only Anthropic reads back: another target gets the
    turn without it, never an error (tests/integration/test_reasoning_targets.py)."""
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    turn = {"role": "assistant", "content": [block, {"type": "text", "text": "a"}]}
    turns = [{"role": "user", "content": "q"}, turn, {"role": "user", "content": "and?"}]
    body = {"model": "m", "max_tokens": 4, "messages": turns}
    status, raw = await asyncio.to_thread(exchange, gw.url, body)
    assert status == 200, raw
    sent = server.requests[-1].body
    assert sent["messages"][1] == {"role": "assistant", "content": "a"}, sent["messages"]
    assert str(block.get("thinking") or block["data"]) not in json.dumps(sent)


SDK_STREAM = """
import json, sys
import anthropic
client = anthropic.Anthropic(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
with client.messages.stream(model="claude", max_tokens=64, messages=[{"role": "user", "content": "q"}],
                            thinking={"type": "enabled", "budget_tokens": 1024}) as s:
    kinds = [e.type for e in s]
    final = s.get_final_message()
print(json.dumps({"kinds": kinds, "content": [b.model_dump(mode="json") for b in final.content]}))
"""


@pytest.mark.skipif(not SDK_PYTHON.exists(), reason="the Anthropic SDK's venv is not built (.sdk-venvs/anthropic)")
async def test_sdk_accumulates_relayed_thinking(
    gateway: GatewayFactory, mirror: tuple[Mirror, TestServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Anthropic SDK's own accumulator, over a relayed stream: thinking with its signature (from
    ``signature_delta``), redacted thinking, and a cited text (``citations_delta``)."""
    m, server = mirror
    monkeypatch.setenv("X_KEY", "up-key")
    gw = await gateway(config([{"name": "claude", "targets": [mirror_target(server)]}]))
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    cited = {"type": "text", "text": "", "citations": [KNOWN_BLOCKS[4]["citations"][0]]}
    m.events = stream_of([thinking, KNOWN_BLOCKS[1], cited], {}, {})
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    argv = [str(SDK_PYTHON), "-c", SDK_STREAM, gw.url, KEY]
    proc = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout)
    assert "signature" in got["kinds"] and "thinking" in got["kinds"] and "citation" in got["kinds"], got["kinds"]
    first, redacted, text = got["content"]
    assert (first["type"], first["thinking"], first["signature"]) == ("thinking", "hmm", "EqQB")
    assert redacted == KNOWN_BLOCKS[1]
    assert text["text"] == "!" and len(text["citations"]) == 2  # the block's own, then the delta's
    assert m.bodies[-1]["thinking"] == {"type": "enabled", "budget_tokens": 1024}


async def test_passthrough_false_translates(
    gateway: GatewayFactory, mirror: tuple[Mirror, TestServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target's ``passthrough: false``: an Anthropic client's body is translated like any dialect's
    (the answer rebuilt from what the gateway models), and what only pass-through carries is refused."""
    m, server = mirror
    monkeypatch.setenv("X_KEY", "up-key")
    gw = await gateway(config([{"name": "claude", "targets": [mirror_target(server) | {"passthrough": False}]}]))
    m.answer = message([{"type": "text", "text": "hi"}], {"x_extra": 1})
    body = {"model": "claude", "max_tokens": 16, "system": "be brief", "messages": [{"role": "user", "content": "q"}]}
    status, raw = await asyncio.to_thread(exchange, gw.url, body)
    assert status == 200, raw
    got = json.loads(raw)
    assert got["content"] == [{"type": "text", "text": "hi"}] and "x_extra" not in got
    assert m.bodies[-1]["system"] == "be brief" and m.bodies[-1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "q"}]}
    ]
    status, raw = await asyncio.to_thread(exchange, gw.url, body | {"x_new": 1})
    assert (
        status == 400
        and "'x_new' is not supported by target 'anthropic:up': not modelled" in json.loads(raw)["error"]["message"]
    ), raw
    assert len(m.bodies) == 1

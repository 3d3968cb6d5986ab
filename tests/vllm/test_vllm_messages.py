"""Anthropic Messages to real vLLM (CPU) through the gateway: vLLM's own /v1/messages, and the same
requests translated to chat for a replica that does not serve the path (a front that 404s it); both
answer greedily with the same text, whole and streamed, in Anthropic's shape."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.front import front
from tests.vllm.conftest import VLLM
from tests.vllm.served import served, tier_config

pytestmark = pytest.mark.vllm
KEY = "gw-vllm-key"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
BODY = {"messages": [{"role": "user", "content": "the quick brown fox"}], "max_tokens": 8, "temperature": 0}


@pytest.fixture
async def gw(vllm_server: VLLM) -> AsyncIterator[tuple[str, aiohttp.ClientSession, list[str]]]:
    """Model ``native`` straight at vLLM; ``translated`` through a front with only the chat route."""
    origin = vllm_server.url.removesuffix("/v1")
    async with front({"/v1/chat": origin, "/v1/models": origin}) as fr:
        models = [
            {"name": "native", "targets": [{"provider": "vllm", "base_url": vllm_server.url, "model": "tiny"}]},
            {"name": "translated", "targets": [{"provider": "vllm", "base_url": fr.url + "/v1", "model": "tiny"}]},
        ]
        async with served(tier_config(models, KEY)) as url, aiohttp.ClientSession() as session:
            yield url, session, fr.missing


async def post(url: str, session: aiohttp.ClientSession, body: dict[str, Any]) -> tuple[int, bytes, str]:
    async with session.post(url + "/v1/messages", json=body, headers=HEADERS) as resp:
        return resp.status, await resp.read(), resp.content_type


def events(raw: bytes) -> list[tuple[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n") if line)
        if lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


@pytest.mark.parametrize("model", ["native", "translated"])
async def test_messages_whole_and_streamed(gw: tuple[str, aiohttp.ClientSession, list[str]], model: str) -> None:
    url, session, missing = gw
    status, raw, _ = await post(url, session, {**BODY, "model": model})
    assert status == 200, raw
    whole = json.loads(raw)
    assert whole["type"] == "message" and whole["role"] == "assistant"
    assert whole["stop_reason"] == "max_tokens" and whole["stop_sequence"] is None
    assert whole["usage"]["input_tokens"] > 0 and whole["usage"]["output_tokens"] == 8
    assert [b["type"] for b in whole["content"]] == ["text"] and whole["content"][0]["text"]
    status, raw, kind = await post(url, session, {**BODY, "model": model, "stream": True})
    assert status == 200 and kind == "text/event-stream", raw
    seq = events(raw)
    names = [name for name, _ in seq]
    assert names[:3] == ["message_start", "ping", "content_block_start"]  # Anthropic's order
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in seq)
    text = "".join(d["delta"]["text"] for n, d in seq if n == "content_block_delta")
    assert text == whole["content"][0]["text"]  # greedy: the stream says what the whole answer said
    assert seq[-2][1]["delta"]["stop_reason"] == "max_tokens" and seq[-2][1]["usage"]["output_tokens"] == 8
    assert missing == ([] if model == "native" else ["/v1/messages"])  # the 404 paid once per target


async def test_native_and_translated_agree(gw: tuple[str, aiohttp.ClientSession, list[str]]) -> None:
    url, session, _ = gw
    answers = [json.loads((await post(url, session, {**BODY, "model": m}))[1]) for m in ("native", "translated")]
    assert answers[0]["content"] == answers[1]["content"]
    assert answers[0]["usage"] == answers[1]["usage"]


async def test_a_system_turn_mid_conversation_both_ways(gw: tuple[str, aiohttp.ClientSession, list[str]]) -> None:
    """Claude Code's system turn after the first message (beta mid-conversation-system-2026-04-07): vLLM's
    own /v1/messages takes it, and the chat it is translated to holds it in its place; the same answer."""
    turns = [
        {"role": "user", "content": "the quick brown fox"},
        {"role": "system", "content": [{"type": "text", "text": "Agent types: claude"}]},
    ]
    body = {**BODY, "messages": turns}
    got = []
    for model in ("native", "translated"):
        status, raw, _ = await post(url := gw[0], gw[1], {**body, "model": model})
        assert status == 200, (model, raw)
        got.append(json.loads(raw))
    assert got[0]["content"] == got[1]["content"] and got[0]["usage"] == got[1]["usage"], (url, got)


async def test_thinking_and_effort_both_ways(gw: tuple[str, aiohttp.ClientSession, list[str]]) -> None:
    """What Claude Code sends (its betas, adaptive thinking, ``output_config.effort``): vLLM's own
    /v1/messages serves it, and a replica without that path takes it on its chat path as vLLM's
    /v1/messages itself puts it there (effort as ``reasoning_effort``): the same greedy answer."""
    url, session, _ = gw
    headers = {**HEADERS, "anthropic-beta": "claude-code-20250219,effort-2025-11-24"}
    body = {**BODY, "thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}
    got = []
    for model in ("native", "translated"):
        async with session.post(url + "/v1/messages", json={**body, "model": model}, headers=headers) as resp:
            raw = await resp.read()
            assert resp.status == 200, (model, raw)
        got.append(json.loads(raw))
    assert got[0]["content"] == got[1]["content"] and got[0]["usage"] == got[1]["usage"], got


async def test_thinking_sent_back_both_ways(gw: tuple[str, aiohttp.ClientSession, list[str]]) -> None:
    """A reasoning model's thinking, sent back with the next turn (Claude Code does): vLLM's own
    /v1/messages hands it to the template as the turn's reasoning, and so does the chat it is
    translated to; the same greedy answer both ways."""
    thought = {"type": "thinking", "thinking": "the fox is quick", "signature": ""}
    turns = [
        {"role": "user", "content": "the quick brown fox"},
        {"role": "assistant", "content": [thought, {"type": "text", "text": "jumps"}]},
        {"role": "user", "content": "over the lazy dog"},
    ]
    got = []
    for model in ("native", "translated"):
        status, raw, _ = await post(gw[0], gw[1], {**BODY, "messages": turns, "model": model})
        assert status == 200, (model, raw)
        got.append(json.loads(raw))
    assert got[0]["content"] == got[1]["content"] and got[0]["usage"] == got[1]["usage"], got

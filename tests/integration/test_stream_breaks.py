"""No false endings: whatever breaks an answer after its head went out (a reset, a stall past the idle
deadline, an error event, a body cut short), the client never gets it ended as if complete.

Each streaming dialect's client, against one target (nothing to continue on) of each kind: the stream
ends with the dialect's in-band error, never a finish reason and the stream's terminator (and, for
the SDKs that would miss that error, an unfinished body); a whole answer cut mid-body is an error
answer, never a 200."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import INGRESSES, Ingress, body_of, frames

FAST = {"connect": 1, "first_byte": 2, "idle": 0.5, "total": 10}
STREAM_FAULTS = ["reset_after=2", "stall_after=2", "error_after=2"]
BODY_FAULTS = ["truncate", "truncate=chunked", "reset_after=1"]
CUT_AFTER_ERROR = ("octoai", "sgp5", "friendli2024")  # SDKs that raise only on an unfinished body


def ending(raw: bytes) -> tuple[bool, bool, bool]:
    """(an error event, a normal finish, the stream's terminator) in a client's stream."""
    error = finish = done = False
    for data in frames(raw):
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        if "error" in chunk or chunk.get("object") == "error" or chunk.get("event") == "error":
            error = True
        if chunk.get("event") == "complete":
            finish = True
        for choice in chunk.get("choices") or ():
            finish = finish or bool(choice.get("finish_reason"))
    return error, finish, done


async def send_raw(gw: Any, ingress: Ingress, prompt: str, stream: bool) -> tuple[int, bytes]:
    status, raw, _ = await send_cut(gw, ingress, prompt, stream)
    return status, raw


async def send_cut(gw: Any, ingress: Ingress, prompt: str, stream: bool) -> tuple[int, bytes, bool]:
    """The status, the bytes that came, and whether the body ended unfinished (no last chunk)."""
    path, headers, body = ingress.request("m", prompt, stream, max_tokens=16)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        return (resp.status, *await body_of(resp))


@pytest.mark.parametrize("kind", ["openai", "vllm"])
@pytest.mark.parametrize("fault", STREAM_FAULTS)
async def test_a_broken_stream_never_ends_as_if_complete(
    gateway: GatewayFactory, upstream: Any, kind: str, fault: str
) -> None:
    server = await upstream(kind, faults=f"[[fault:{fault}]]")
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind, timeouts=FAST)]}]))
    for ingress in INGRESSES:
        status, raw, cut = await send_cut(gw, ingress, "hello there", True)
        error, finish, done = ending(raw)
        assert status == 200 and error and not finish and not done, (ingress.name, raw)
        # their SDKs skip or yield the error chunk and take a clean end for a whole answer
        assert cut or ingress.name not in CUT_AFTER_ERROR, (ingress.name, raw)


@pytest.mark.parametrize("kind", ["openai", "vllm"])
@pytest.mark.parametrize("fault", BODY_FAULTS)
async def test_a_whole_answer_cut_mid_body_is_an_error(
    gateway: GatewayFactory, upstream: Any, kind: str, fault: str
) -> None:
    server = await upstream(kind, faults=f"[[fault:{fault}]]")
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind, timeouts=FAST)]}]))
    for ingress in INGRESSES:
        status, raw = await send_raw(gw, ingress, "hello there", False)
        assert status in (502, 503, 504), (ingress.name, fault, status, raw)  # 503: cooling down
        assert b"choices" not in raw, raw

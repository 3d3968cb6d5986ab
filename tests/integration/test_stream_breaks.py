"""No false endings: whatever breaks an answer after its head went out (a reset, a stall past the idle
deadline, an error event, a body cut short), the client never gets it ended as if complete.

Each streaming dialect's client, against one target (nothing to continue on) of each kind: the stream
ends with the dialect's in-band error, never a finish reason and the stream's terminator (and, for
the SDKs that would miss that error, an unfinished body); a whole answer cut mid-body is an error
answer, never a 200."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.integration.conftest import BREAK_TIMEOUTS, GatewayFactory, config, faulty_gateway, target
from tests.integration.dialect_clients import INGRESSES, STREAMING, Ingress, body_of, frames, read_stream
from tests.support import HANG_GUARD, eventually

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
    _, gw = await faulty_gateway(gateway, upstream, kind, fault)
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
    _, gw = await faulty_gateway(gateway, upstream, kind, fault)
    for ingress in INGRESSES:
        status, raw = await send_raw(gw, ingress, "hello there", False)
        assert status in (502, 503, 504), (ingress.name, fault, status, raw)  # 503: cooling down
        assert b"choices" not in raw, raw


@pytest.mark.parametrize("kind", ["vllm", "anthropic"])
async def test_a_stream_that_goes_on_outlasts_its_total_bound(
    gateway: GatewayFactory, upstream: Any, kind: str
) -> None:
    """``total`` bounds a stream's time without progress, not a long answer: tokens 0.1 s apart for
    longer than a 0.3 s total arrive whole."""
    _, gw = await faulty_gateway(gateway, upstream, kind, "slow=0.1", total=0.3)
    ingress = STREAMING[0]
    status, raw = await send_raw(gw, ingress, "hello there", True)
    reading = read_stream(ingress, raw)
    assert status == 200 and reading.complete and not reading.error, raw


@pytest.mark.parametrize("kind", ["vllm", "anthropic"])
async def test_a_stream_kept_alive_without_progress_ends_at_its_total_bound(
    gateway: GatewayFactory, upstream: Any, kind: str
) -> None:
    """An engine stuck mid-answer behind keep-alives (SSE comments; Anthropic's pings) has a read come
    well within ``idle`` for ever: the target's ``total`` still ends the stream, with the dialect's
    in-band error, and the upstream request is cancelled."""
    server, gw = await faulty_gateway(gateway, upstream, kind, "ping_after=2", total=0.5)
    async with asyncio.timeout(HANG_GUARD):  # without the bound, the first stream never ends
        for ingress in STREAMING:
            status, raw = await send_raw(gw, ingress, "hello there", True)
            reading = read_stream(ingress, raw)
            assert status == 200 and reading.error and not reading.complete, (ingress.name, raw)
            assert b"not complete in time" in raw, (ingress.name, raw)
    await eventually(lambda: server.cancelled == len(STREAMING), "every stuck stream cancelled upstream")


@pytest.mark.parametrize(("kind", "ingresses"), [("anthropic", STREAMING), ("openai", STREAMING[-1:])])
async def test_a_stream_broken_before_its_first_token_goes_to_the_next_target(
    gateway: GatewayFactory, upstream: Any, kind: str, ingresses: list[Ingress]
) -> None:
    """A stream whose identity came (Anthropic's ``message_start``, a Responses ``response.created``)
    and then broke has sent its client nothing of the answer: the next target answers it, as it
    would a failure before the head, with no first-token bound configured and nothing to resume."""
    healthy = await upstream(kind)
    for ingress in ingresses:
        broken = await upstream(kind, faults="[[fault:reset_after=0]]")
        targets = [target(broken, kind, weight=1e6, timeouts=BREAK_TIMEOUTS), target(healthy, kind, weight=1e-6)]
        gw = await gateway(config([{"name": "m", "targets": targets, "resume": False}]))
        status, raw = await send_raw(gw, ingress, "hello there", True)
        reading = read_stream(ingress, raw)
        assert status == 200 and reading.complete and reading.text, (ingress.name, raw)
        assert len(broken.requests) == 1, ingress.name  # it broke: not skipped

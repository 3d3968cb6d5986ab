"""Retries, fallbacks, cool-downs, timeouts and cancellation, over real sockets.

Fallback happens only before the first byte; a client's deadline answers in its own dialect (429 for
Friendli, 504 elsewhere); a client that goes away closes the upstream request."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError

from gateway.dialects.openai.render import ChunkEncoder
from gateway.web.record import RequestLog
from gateway.web.state import GATEWAY
from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BY_NAME, frames
from tests.support import eventually

OPENAI = BY_NAME["openai"]
FAST = {"connect": 1, "first_byte": 0.5, "idle": 0.5, "total": 2}


async def test_dead_target_falls_back(gateway: GatewayFactory, upstream: Any) -> None:
    dead = await upstream("openai", faults="[[fault:status=500]]")
    live = await upstream("friendli")
    gw = await gateway(
        config(
            [
                {
                    "name": "m",
                    "targets": [target(dead, "openai", weight=1e6), target(live, "friendli", weight=1e-6)],
                }
            ]
        )
    )
    for stream in (False, True):
        answer = await gw.send(OPENAI, "m", "hello", stream)
        assert answer.status == 200 and answer.text, answer.raw
    assert len(dead.requests) >= 1 and len(live.requests) == 2


async def test_rate_limited_target_falls_back_and_reports_retry_after(gateway: GatewayFactory, upstream: Any) -> None:
    busy = await upstream("openai")
    live = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(busy, "openai")]}]))
    answer = await gw.send(OPENAI, "m", "x [[fault:status=429,retry_after=1]]", False)
    assert answer.status == 429
    gw2 = await gateway(
        config([{"name": "m", "targets": [target(busy, "openai", weight=1e6), target(live, "openai", weight=1e-6)]}])
    )
    ok = await gw2.send(OPENAI, "m", "x [[fault:status=429,retry_after=1]]", False)
    # both targets see the marker, so both refuse: the client gets the 429 after the fallback was tried
    assert ok.status == 429 and len(live.requests) == 1


async def test_rejection_is_not_retried(gateway: GatewayFactory, upstream: Any) -> None:
    first = await upstream("openai")
    second = await upstream("openai")
    gw = await gateway(
        config([{"name": "m", "targets": [target(first, "openai", weight=1e6), target(second, "openai", weight=1e-6)]}])
    )
    answer = await gw.send(OPENAI, "m", "x [[fault:status=400]]", False)
    assert answer.status == 400 and len(second.requests) == 0


async def test_reset_before_first_byte_falls_back(gateway: GatewayFactory, upstream: Any) -> None:
    flaky = await upstream("openai", faults="[[fault:reset_before]]")
    live = await upstream("sgp")
    gw = await gateway(
        config([{"name": "m", "targets": [target(flaky, "openai", weight=1e6), target(live, "sgp", weight=1e-6)]}])
    )
    answer = await gw.send(OPENAI, "m", "x", True)
    assert answer.status == 200 and answer.done and len(live.requests) == 1


async def test_no_fallback_after_first_byte(gateway: GatewayFactory, upstream: Any) -> None:
    flaky = await upstream("openai")
    live = await upstream("openai")
    gw = await gateway(
        config([{"name": "m", "targets": [target(flaky, "openai", weight=1e6), target(live, "openai", weight=1e-6)]}])
    )
    answer = await gw.send(OPENAI, "m", "x [[fault:reset_after=2,hang_between=0.05]]", True)
    assert answer.status == 200 and not answer.done and answer.finish == "error"
    assert len(live.requests) == 0


async def test_repeated_failures_cool_a_target_down(gateway: GatewayFactory, upstream: Any) -> None:
    dead = await upstream("openai", faults="[[fault:status=503]]")
    gw = await gateway(config([{"name": "m", "targets": [target(dead, "openai")]}]))
    statuses = [(await gw.send(OPENAI, "m", "x", False)).status for _ in range(4)]
    assert statuses == [502, 502, 502, 503]
    assert len(dead.requests) == 3


async def test_first_byte_timeout_is_504(gateway: GatewayFactory, upstream: Any) -> None:
    slow = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(slow, "openai", timeouts=FAST)]}]))
    answer = await gw.send(OPENAI, "m", "x [[fault:hang_before=1.5]]", False)
    assert answer.status == 504 and answer.body["error"]["code"] == "upstream_timeout"


async def test_idle_timeout_mid_stream_is_in_band(gateway: GatewayFactory, upstream: Any) -> None:
    slow = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(slow, "openai", timeouts=FAST)]}]))
    answer = await gw.send(OPENAI, "m", "x [[fault:hang_between=0.8]]", True)
    assert answer.status == 200 and answer.finish == "error" and not answer.done
    assert b"idle" in answer.raw


async def test_client_deadlines_answer_in_their_dialect(gateway: GatewayFactory, upstream: Any) -> None:
    slow = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(slow, "openai")]}]))
    fr = await gw.send(BY_NAME["friendli2024"], "m", "x [[fault:hang_before=1]]", False, timeout_microseconds=200_000)
    assert fr.status == 429, fr.raw
    sgp = await gw.send(BY_NAME["sgp"], "m", "x [[fault:hang_before=1]]", False, inference_timeout=0.2)
    assert sgp.status == 504 and "deadline" in sgp.body["detail"]


def access_lines(gw: Any, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The access lines so far, with the ended requests' batch done now."""
    gw.server.app[GATEWAY].backlog.drain()
    return [r for r in caplog.records if r.name == "gateway.access"]


async def test_client_disconnect_closes_upstream(
    gateway: GatewayFactory, upstream: Any, caplog: pytest.LogCaptureFixture
) -> None:
    slow = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(slow, "openai")]}]))
    path, headers, body = OPENAI.request("m", "x [[fault:hang_between=0.2]]", True)
    with caplog.at_level(logging.INFO):
        async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
            assert resp.status == 200
            await resp.content.readline()
        await eventually(lambda: slow.cancelled, "the upstream's request cancelled")
        assert slow.cancelled == 1
        await eventually(lambda: access_lines(gw, caplog), "the access line (the handler has ended)")
    # a client that leaves is a normal end: one access line says so, and nothing is logged as an error
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    access = [r for r in caplog.records if r.name == "gateway.access"]
    assert [r.fields["error"] for r in access] == ["client_gone"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_a_client_gone_at_the_answer_s_last_write_is_no_error(
    gateway: GatewayFactory,
    upstream: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    write_eof = web.StreamResponse.write_eof

    async def gone(self: web.StreamResponse, data: bytes = b"") -> None:
        if "X-Request-Id" in self.headers:  # the gateway's answer, not the fake upstream's
            raise ClientConnectionResetError("Cannot write to closing transport")  # as aiohttp raises it
        await write_eof(self, data)

    monkeypatch.setattr(web.StreamResponse, "write_eof", gone)
    with caplog.at_level(logging.INFO):
        with contextlib.suppress(aiohttp.ClientError):
            await gw.send(OPENAI, "m", "hello", stream)
        await eventually(lambda: access_lines(gw, caplog), "the access line (the handler has ended)")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    access = [r for r in caplog.records if r.name == "gateway.access"]
    assert [r.fields["error"] for r in access] == ["client_gone"]  # type: ignore[attr-defined]


async def test_a_fault_of_ours_mid_stream_ends_the_stream_in_its_dialect(
    gateway: GatewayFactory, upstream: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the head went out, a bug in the gateway cannot answer 500 any more: the stream ends with
    an in-band error, as an upstream's failure would end it."""
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))

    def broken(self: ChunkEncoder) -> bytes:
        raise RuntimeError("a bug at the stream's end")

    monkeypatch.setattr(ChunkEncoder, "end", broken)
    with caplog.at_level(logging.INFO):
        answer = await gw.send(OPENAI, "m", "hello", True)
        gw.server.app[GATEWAY].backlog.drain()  # the access line waits for its batch
    assert answer.status == 200
    last = json.loads(frames(answer.raw)[-1])
    assert last["error"]["message"] == "internal error in the gateway"
    assert any("unexpected error relaying" in r.getMessage() for r in caplog.records)
    access = [r for r in caplog.records if r.name == "gateway.access"]
    assert [r.fields["error"] for r in access] == ["internal_error"]  # type: ignore[attr-defined]


async def test_whole_answers_leave_before_their_bookkeeping(
    gateway: GatewayFactory, upstream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settling, metrics and the access line run once the client has its answer, not before it: the
    line and metrics in a batch of ended requests, within ``BACKLOG_SECONDS``."""
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    order: list[str] = []
    write_eof, emit = web.StreamResponse.write_eof, RequestLog.emit

    async def sent(self: web.StreamResponse, data: bytes = b"") -> None:
        await write_eof(self, data)
        if "X-Request-Id" in self.headers:  # the gateway's answer, not the fake upstream's
            order.append("sent")

    def logged(self: RequestLog) -> None:
        order.append("logged")
        emit(self)

    monkeypatch.setattr(web.StreamResponse, "write_eof", sent)
    monkeypatch.setattr(RequestLog, "emit", logged)
    assert (await gw.send(OPENAI, "m", "hello", False)).status == 200
    assert (await gw.send(OPENAI, "no-such-model", "hello", False)).status == 404
    assert order == ["sent", "sent"]
    # in their batch, timed by a loop timer of BACKLOG_SECONDS (tests/unit/test_logs times it)
    await eventually(lambda: len(order) == 4, "both requests logged")
    assert order == ["sent", "sent", "logged", "logged"]


async def test_streams_and_whole_answers_agree(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    whole = await gw.send(OPENAI, "m", "agree?", False, max_tokens=50)
    streamed = await gw.send(OPENAI, "m", "agree?", True, max_tokens=50)
    assert whole.text == streamed.text == fake.expected("agree?", 50)
    assert whole.finish == streamed.finish == "stop"


async def test_upstream_refusing_our_credentials_is_502_not_401(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai", api_key="another-key")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    answer = await gw.send(OPENAI, "m", "x", False)
    assert answer.status == 502 and "credentials" in answer.body["error"]["message"]


async def test_vllm_in_band_error_after_200_reaches_the_client(gateway: GatewayFactory) -> None:
    """Against the faithful vLLM stand-in: vLLM reports some failures inside a 200 stream."""
    fake_ = await fake.start("vllm", models=("tiny",))
    try:
        gw = await gateway(
            config([{"name": "m", "targets": [{"provider": "vllm", "base_url": fake_.url, "model": "tiny"}]}])
        )
        answer = await gw.send(OPENAI, "m", "x [[fault:error_after=2]]", True)
        assert answer.status == 200 and answer.finish == "error" and not answer.done
        whole = await gw.send(OPENAI, "m", "hello", False)
        assert whole.status == 200 and whole.text
    finally:
        await fake_.close()


async def test_a_connection_closed_under_a_request_is_retried_on_a_new_one(gateway: GatewayFactory) -> None:
    """A server that closes each kept-alive connection when the next request arrives (its keep-alive
    ran out as the gateway sent): every request must still get its answer from the one target, with
    no fallback to try and no error for the client."""
    choice = {"index": 0, "text": "ok", "finish_reason": "stop", "logprobs": None}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    answer = json.dumps(
        {"id": "c", "object": "text_completion", "created": 1, "model": "up", "choices": [choice], "usage": usage}
    ).encode()
    answered = closed = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered, closed
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            head = await reader.readuntil(b"\r\n\r\n")
            sizes = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
            await reader.readexactly(sizes[0] if sizes else 0)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(answer)
            )
            writer.write(answer)
            await writer.drain()
            answered += head.startswith(b"POST")
            await reader.readuntil(b"\r\n\r\n")  # the next request on this connection: closed unanswered
            closed += 1
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        gw = await gateway(
            config([{"name": "m", "targets": [{"provider": "openai", "base_url": f"http://127.0.0.1:{port}/v1"}]}])
        )
        for _ in range(3):
            answer_ = await gw.send(OPENAI, "m", "hello", False)
            assert answer_.status == 200 and answer_.text == "ok", answer_.raw
        assert answered == 3 and closed >= 2  # the 2nd and 3rd were each sent on a closing connection first
    finally:
        server.close()

"""Answers in each dialect's own shape; streams that add up to the non-streaming answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.errors import DeadlineExceeded, InvalidRequest, UpstreamFailed
from gateway.core.request import Operation
from gateway.core.response import (
    Accumulator,
    Delta,
    Finish,
    StreamEvent,
    StreamStart,
    TokenLogprob,
    Usage,
    UsageReport,
)
from gateway.dialects import FRIENDLI, FRIENDLI_2024, OCTOAI, OPENAI, SGP_V4, SGP_V5
from gateway.dialects.base import Dialect
from gateway.dialects.common import dumps
from gateway.dialects.sse import SSEParser

ALL = [OPENAI, FRIENDLI, FRIENDLI_2024, SGP_V4, SGP_V5, OCTOAI]
EVENTS: list[StreamEvent] = [
    StreamStart("cmpl-1", 1700000000, "tiny", None),
    Delta(0, " Hel", (11,), (TokenLogprob(" Hel", -0.5, ((" Hel", -0.5), (" He", -1.5))),)),
    Delta(0, "lo", (12,), (TokenLogprob("lo", -0.25),)),
    Finish(0, "length", 42),
    UsageReport(Usage(3, 2)),
]


def request(d: Dialect, stream: bool, **extra: Any) -> Any:
    body = {"model": "tiny", "prompt": "hi", "stream": stream, **extra}
    if stream and d not in (SGP_V4, FRIENDLI_2024):
        body["stream_options"] = {"include_usage": True}
    return d.parse(Operation.COMPLETION, body, "serverless")


def frames(raw: bytes) -> list[Any]:
    events = SSEParser().feed(raw)
    return [e.data.decode() if e.data == b"[DONE]" else json.loads(e.data) for e in events]


def run(d: Dialect, req: Any, events: list[StreamEvent]) -> bytes:
    enc = d.encoder(req)
    return b"".join(enc.event(e) for e in events) + enc.end()


def test_openai_golden() -> None:
    req = request(OPENAI, False, logprobs=1)
    body = OPENAI.render(req, Accumulator().extend(EVENTS).completion())
    assert body == {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1700000000,
        "model": "tiny",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "text": " Hello",
                "finish_reason": "length",
                "logprobs": {
                    "tokens": [" Hel", "lo"],
                    "token_logprobs": [-0.5, -0.25],
                    "top_logprobs": [{" Hel": -0.5, " He": -1.5}, {"lo": -0.25}],
                    "text_offset": [0, 4],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def test_friendli_requires_seed_and_tokens() -> None:
    body = FRIENDLI.render(request(FRIENDLI, False), Accumulator().extend(EVENTS).completion())
    assert body["choices"][0]["seed"] == 42 and body["choices"][0]["tokens"] == [11, 12]
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_octoai_fingerprint_and_usage_on_last_content_chunk() -> None:
    req = request(OCTOAI, True)
    body = OCTOAI.render(request(OCTOAI, False), Accumulator().extend(EVENTS).completion())
    assert body["system_fingerprint"]
    chunks = frames(run(OCTOAI, req, EVENTS))
    assert chunks[-1] == "[DONE]"
    last = chunks[-2]
    assert last["choices"][0]["finish_reason"] == "length" and last["usage"]["total_tokens"] == 5
    assert all("usage" not in c for c in chunks[:-2]) and all(c["system_fingerprint"] for c in chunks[:-1])


@pytest.mark.parametrize("dialect", [SGP_V4, SGP_V5])
def test_sgp_streams_never_send_done(dialect: Dialect) -> None:
    raw = run(dialect, request(dialect, True), EVENTS)
    assert b"[DONE]" not in raw and frames(raw)[-1]["usage"]["total_tokens"] == 5


def test_friendli_2024_stream_lines() -> None:
    raw = run(FRIENDLI_2024, request(FRIENDLI_2024, True, timeout_microseconds=None), EVENTS)
    lines = frames(raw)
    assert lines[0] == {"event": "token_sampled", "index": 0, "text": " Hel", "token": 11}
    complete = lines[-2]
    assert complete["event"] == "complete" and complete["choices"][0]["text"] == " Hello"
    assert complete["choices"][0]["tokens"] == [11, 12] and complete["usage"]["total_tokens"] == 5
    assert lines[-1] == "[DONE]" and b"event:" not in raw and b"\n:" not in raw


@pytest.mark.parametrize("dialect", ALL, ids=lambda d: d.name)
def test_stream_adds_up_to_the_answer(dialect: Dialect) -> None:
    full = dialect.render(request(dialect, False), Accumulator().extend(EVENTS).completion())
    chunks = [c for c in frames(run(dialect, request(dialect, True), EVENTS)) if c != "[DONE]"]
    if dialect is FRIENDLI_2024:
        text = "".join(c["text"] for c in chunks if c.get("event") == "token_sampled")
    else:
        text = "".join(ch["text"] for c in chunks for ch in c["choices"])
    assert text == full["choices"][0]["text"] == " Hello"


@pytest.mark.parametrize("dialect", ALL, ids=lambda d: d.name)
def test_in_band_error_after_first_byte(dialect: Dialect) -> None:
    enc = dialect.encoder(request(dialect, True))
    raw = b"".join(enc.event(e) for e in EVENTS[:2]) + enc.error(UpstreamFailed("upstream broke off"))
    assert b"upstream broke off" in raw and b"[DONE]" not in raw


def test_chat_stream_role_then_content() -> None:
    req = OPENAI.parse(
        Operation.CHAT, {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}, ""
    )
    chunks = frames(run(OPENAI, req, EVENTS))
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": " Hel"}
    assert chunks[1]["choices"][0]["delta"] == {"content": "lo"}


@pytest.mark.parametrize(
    ("dialect", "status", "shape"),
    [
        (OPENAI, 400, {"error"}),
        (FRIENDLI, 400, {"message", "error"}),
        (SGP_V4, 422, {"detail"}),
        (OCTOAI, 400, {"object", "type", "message", "code", "param", "validation_errors"}),
    ],
)
def test_error_envelopes(dialect: Dialect, status: int, shape: set[str]) -> None:
    reply = dialect.error(InvalidRequest("'max_tokens': bad", param="max_tokens"))
    assert reply.status == status and set(reply.body) == shape
    assert b"max_tokens" in dumps(reply.body)


def test_deadline_status_per_dialect() -> None:
    err = DeadlineExceeded("deadline")
    assert FRIENDLI_2024.error(err).status == 429 and SGP_V4.error(err).status == 504
    assert OPENAI.error(err).status == 504

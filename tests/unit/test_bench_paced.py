"""The paced-stream benchmark's client (``benchmarks/paced.py``): what it counts from the bytes a
stream delivers."""

from __future__ import annotations

import math
import time
from typing import Any

from benchmarks.paced import PacedStream, Window, stalled, stream_request

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Transport:
    def __init__(self) -> None:
        self.written = b""

    def write(self, data: bytes) -> None:
        self.written += data


def opened(window: Window) -> tuple[PacedStream, Transport]:
    stream, transport = PacedStream(b"POST / HTTP/1.1\r\n\r\n", window), Transport()
    stream.connection_made(transport)  # type: ignore[arg-type]
    return stream, transport


def test_every_event_in_the_window_counts_and_each_read_after_the_first_gives_a_gap() -> None:
    window = Window(start=0.0)
    stream, transport = opened(window)
    assert transport.written.startswith(b"POST / ")
    stream.data_received(HEAD)
    stream.data_received(b'2a\r\ndata: {"choices":[{"text":"a"}]}\n\n\r\n')
    stream.data_received(b'data: {"x":1}\n\ndata: {"x":2}\n\n')  # two events in one read: one gap
    assert window.tokens == 3 and len(window.gaps) == 1 and window.failed == 0


def test_events_that_come_with_the_head_count() -> None:
    window = Window(start=0.0)
    stream, _ = opened(window)
    stream.data_received(HEAD + b'data: {"x":1}\n\n')
    assert window.tokens == 1 and window.failed == 0


def test_an_answer_that_ends_before_the_window_does_is_a_failure_not_a_stall() -> None:
    """A keep-alive stream that ended cleanly stays open and silent: without this it counted as
    stalled whenever a stretched ramp outlasted the fake's answers."""
    window = Window(start=0.0, end=math.inf)
    ended, _ = opened(window)
    ended.data_received(HEAD + b'data: {"x":1}\n\n')
    ended.data_received(b"data: [DONE]\n\n")  # not a token
    assert window.tokens == 1 and window.failed == 1 and stalled([ended]) == 0
    late = Window(start=0.0, end=time.perf_counter())  # the window is over: nothing more counts
    after, _ = opened(late)
    after.data_received(HEAD + b"data: [DONE]\n\n")
    assert late.failed == 0 and late.tokens == 0


def test_events_outside_the_window_do_not_count() -> None:
    window = Window()  # not started
    stream, _ = opened(window)
    stream.data_received(HEAD + b'data: {"x":1}\n\n')
    assert window.tokens == 0 and len(window.gaps) == 0


def test_a_refused_stream_and_one_cut_short_are_failures() -> None:
    window = Window(start=0.0)
    refused, _ = opened(window)
    refused.data_received(b"HTTP/1.1 429 Too Many Requests\r\n\r\n")
    cut, _ = opened(window)
    cut.connection_lost(None)  # before the window's end (never set: infinity)
    assert window.failed == 2


def test_the_request_is_one_http_message() -> None:
    body: dict[str, Any] = {"model": "tiny", "stream": True}
    raw = stream_request(9000, "/v1/completions", {"Authorization": "Bearer k"}, body)
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:9000\r\n")
    assert b"Authorization: Bearer k" in head and f"Content-Length: {len(payload)}".encode() in head


def test_a_stream_open_all_window_without_a_token_is_stalled_not_fine() -> None:
    window = Window(start=0.0)  # open-ended: every event counts
    silent, _ = opened(window)
    silent.data_received(HEAD)  # answered, then nothing: a proxy holding it
    talking, _ = opened(window)
    talking.data_received(HEAD + b'data: {"x":1}\n\n')
    refused, _ = opened(window)
    refused.data_received(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
    assert stalled([silent, talking, refused]) == 1 and window.failed == 1


def test_the_window_waits_until_every_opened_stream_has_a_token_or_failed() -> None:
    window = Window()
    slow, fast, refused = opened(window), opened(window), opened(window)
    fast[0].data_received(HEAD + b'data: {"x":1}\n\n')
    refused[0].data_received(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
    window.opened = 3  # the ramp is over
    fast[0].data_received(b'data: {"x":2}\n\n')  # a second token is no news
    assert window.going == 2 and not window.settled.is_set()
    slow[0].data_received(HEAD)
    slow[0].data_received(b'data: {"x":1}\n\n')
    assert window.settled.is_set()


def test_every_scenario_asks_the_fake_for_an_answer_it_serves() -> None:
    """The cpu scenario's streams (20 tok/s) once asked for 2,550 tokens, past the fake model's
    context: every stream was refused. Defaults and a long ramp stay within it, and outlast the window
    when the settle is quick."""
    from benchmarks.paced import MAX_STREAM_TOKENS, parse_args, ramp_for, stream_tokens
    from tests.fakes.upstream.model import MAX_MODEL_LEN

    args = parse_args([])
    for streams, rate in ((args.cpu_streams, args.cpu_rate), (10_000, 1.0)):
        ramp = ramp_for(streams, args)
        tokens = stream_tokens(rate, ramp, args.seconds)
        assert tokens <= MAX_STREAM_TOKENS < MAX_MODEL_LEN
        assert tokens / rate > ramp + args.seconds + 10

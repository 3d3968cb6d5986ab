"""A Messages stream over an OpenAI-wire target, its chunks relayed as they came (``Frame``, ``Token``)
and written as Anthropic's events in bytes, is byte for byte the stream that decoding every chunk
gives: whatever the texts hold, however the reads cut the stream, with tool calls and reasoning
between texts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.request import InternalRequest
from gateway.core.response import Frame, StreamEvent, Token
from gateway.dialects.anthropic.parse import parse
from gateway.dialects.anthropic.render import MessagesEncoder
from gateway.dialects.openai.chunks import ChunkDecoder
from gateway.dialects.openai.egress import OPENAI_WIRE

JSON = Any
HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
SPECIAL = [" hello", " wörld", "", ' "quoted"', "two\nlines", "back\\slash", " 🙂", " tab\t"]
TEXTS = st.sampled_from(SPECIAL)


def chunk(delta: JSON, finish: str | None = None, usage: JSON = None, ascii_only: bool = False) -> bytes:
    data = {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
    if usage is not None:
        data = {**HEAD, "choices": [], "usage": usage}
    return b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=ascii_only).encode() + b"\n\n"


def delta(kind: str, text: str, n: int) -> JSON:
    if kind == "tool":
        return {"tool_calls": [{"index": 0, "id": f"call_{n}", "function": {"name": "f", "arguments": '{"a":1}'}}]}
    if kind == "refusal":  # another key of the content's length: an event of another shape, as long
        return {"refusal": text or "-"}
    if kind == "keys":  # a text followed by keys of its own: the tail still reads as a text's
        return {"content": text or "-", "x": '"},"finish_reason":null'}
    return {"reasoning_content": text or "-"} if kind == "reasoning" else {"content": text}


KINDS = st.lists(
    st.tuples(st.sampled_from(["text", "text", "text", "tool", "reasoning", "keys", "refusal"]), TEXTS), max_size=12
)


def stream(kinds: list[tuple[str, str]], ascii_only: bool) -> list[bytes]:
    first = chunk({"role": "assistant", "content": " first"}, ascii_only=ascii_only)
    middle = [chunk(delta(kind, text, n), ascii_only=ascii_only) for n, (kind, text) in enumerate(kinds)]
    usage = {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}
    return [first, *middle, chunk({}, "stop"), chunk({}, usage=usage), b"data: [DONE]\n\n"]


def request() -> InternalRequest:
    return parse({"model": "m", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hi"}]})


def encoded(events: list[StreamEvent], req: InternalRequest) -> bytes:
    encoder = MessagesEncoder(req)
    return b"".join(encoder.event(ev) for ev in events) + encoder.end()


def decoded(events: list[bytes], req: InternalRequest) -> list[StreamEvent]:
    """Every chunk decoded (no relay), as before relaying."""
    reader = ChunkDecoder(req.operation)
    out = [ev for e in events if e != b"data: [DONE]\n\n" for ev in reader.decode(json.loads(e[6:]))]
    return out + reader.finish()


def read(reader: ChunkDecoder, buffer: bytes) -> list[StreamEvent]:
    """One read at an event boundary as ``adapters/http.py`` takes it: a ``Token``, a relayed run,
    then each event relayed or decoded."""
    if reader.started and reader.same_shape(buffer):
        return [Token(buffer)]
    out: list[StreamEvent] = []
    if reader.started and (run := reader.relay_run(buffer)) is not None:
        out.append(run[0])
        buffer = buffer[run[1] :]
    for event in buffer.split(b"\n\n")[:-1]:
        data = event[6:]
        if data == b"[DONE]":
            return out + reader.finish()
        out += [frame] if (frame := reader.relay(data)) is not None else reader.decode(json.loads(data))
    return out


def relayed(events: list[bytes], cuts: list[int], req: InternalRequest) -> list[StreamEvent]:
    reader = OPENAI_WIRE.reader(req)
    assert reader.relaying
    out, at = read(reader, events[0]), 1  # the first event alone (``_first_apart``)
    for size in [*cuts, len(events)]:
        out += read(reader, b"".join(events[at : at + size]))
        at += size
    return out


@given(KINDS, st.lists(st.integers(1, 4), max_size=12), st.booleans())
def test_relayed_chunks_are_written_as_decoded_ones_would_be(
    kinds: list[tuple[str, str]], cuts: list[int], ascii_only: bool
) -> None:
    req = request()
    events = stream(kinds, ascii_only)
    assert encoded(relayed(events, cuts, req), req) == encoded(decoded(events, req), req)


@pytest.mark.parametrize("ascii_only", [False, True])
@pytest.mark.parametrize("text", SPECIAL)
def test_a_run_of_texts_is_written_at_once_only_where_each_would_be(text: str, ascii_only: bool) -> None:
    req = request()
    events = stream([("text", " a"), ("text", text), ("text", " b"), ("refusal", text), ("text", " c")], ascii_only)
    assert encoded(relayed(events, [2, 3], req), req) == encoded(decoded(events, req), req)


def test_a_token_s_text_goes_into_the_open_text_block_s_event_as_it_came() -> None:
    req = request()
    events = stream([("text", " a"), ("text", " b"), ("text", " c")], ascii_only=False)
    got = relayed(events, [1, 1, 1], req)
    assert [type(ev) for ev in got[2:5]] == [Frame, Token, Token]  # the frame lends the tokens its shape
    out = encoded(got, req)
    assert out.count(b'"type":"text_delta","text":" c"}}\n\n') == 1
    assert out.count(b"event: content_block_start") == 1

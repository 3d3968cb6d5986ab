"""An Anthropic client's stream from an Anthropic target, its runs of content events relayed as they
came (``EventReader.relay_run``), is the stream that decoding every event and writing it again gives:
byte for byte where the upstream writes JSON as the gateway would, event for event otherwise, with the
encoder's blocks counted the same after every read, however the reads cut the stream; what the gateway
accounts for (the finish, the usage) is still read."""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.request import InternalRequest
from gateway.core.response import Finish, Frame, StreamEvent, UsageReport
from gateway.dialects.anthropic.egress import ANTHROPIC_WIRE, EventReader
from gateway.dialects.anthropic.parse import parse
from gateway.dialects.anthropic.render import MessagesEncoder
from gateway.dialects.sse import SSEParser

JSON = Any
TEXTS = st.sampled_from([" hello", " wörld", "", ' "quoted"', "two\nlines", "back\\slash", " 🙂", "event: ping\n"])


def start(index: int, block: JSON) -> JSON:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, body: JSON) -> JSON:
    return {"type": "content_block_delta", "index": index, "delta": body}


def block(index: int, kind: str, text: str) -> list[JSON]:
    """One content block's events: its start, two deltas, its end."""
    if kind == "tool":
        first = start(index, {"type": "tool_use", "id": f"toolu_{index}", "name": "f", "input": {}})
        parts = [
            delta(index, {"type": "input_json_delta", "partial_json": p}) for p in ('{"a":', json.dumps(text) + "}")
        ]
    elif kind == "thinking":
        first = start(index, {"type": "thinking", "thinking": "", "signature": ""})
        parts = [
            delta(index, {"type": "thinking_delta", "thinking": text}),
            delta(index, {"type": "signature_delta", "signature": "s"}),
        ]
    elif kind == "server":  # a block the gateway does not model: it goes as it came
        first = start(index, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}})
        parts = [delta(index, {"type": "citations_delta", "citation": {"cited_text": text}})]
    else:
        first = start(index, {"type": "text", "text": ""})
        parts = [delta(index, {"type": "text_delta", "text": text}), delta(index, {"type": "text_delta", "text": "!"})]
    return [first, *parts, {"type": "content_block_stop", "index": index}]


KINDS = st.lists(st.tuples(st.sampled_from(["text", "text", "tool", "thinking", "server"]), TEXTS), max_size=6)


def stream(kinds: list[tuple[str, str]]) -> list[JSON]:
    usage = {"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 2}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [], "usage": usage}
    events: list[JSON] = [{"type": "message_start", "message": message}, {"type": "ping"}]
    for i, (kind, text) in enumerate(kinds):
        events += block(i, kind, text)
    ending = {"stop_reason": "end_turn", "stop_sequence": None}
    return [
        *events,
        {"type": "message_delta", "delta": ending, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]


def framed(event: JSON, style: str) -> bytes:
    """One event as an upstream writes it: as the gateway would (``compact``), escaping what is not
    ASCII (``ascii``), or in framing the relay does not take (``spaced``: a blank after each colon)."""
    if style == "compact":
        data = pydantic_core.to_json(event)
    else:
        spaced = style == "spaced"
        data = json.dumps(event, separators=(", ", ": ") if spaced else (",", ":"), ensure_ascii=True).encode()
    return b"event: " + event["type"].encode() + b"\ndata: " + data + b"\n\n"


def request() -> InternalRequest:
    return parse({"model": "m", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hi"}]})


def read(reader: EventReader, parser: SSEParser, buffer: bytes, relay: bool) -> list[StreamEvent]:
    """One read as ``adapters/http.py`` takes it: the run it opens with relayed (the parser between
    events), the rest parsed and decoded."""
    out: list[StreamEvent] = []
    if relay and reader.relaying and parser.idle and (run := reader.relay_run(buffer)) is not None:
        out.append(run[0])
        buffer = buffer[run[1] :]
    for event in parser.feed(buffer):
        out += reader.decode(json.loads(event.data))
    return out


def through(raw: bytes, cuts: list[int], relay: bool) -> tuple[bytes, list[tuple[Any, ...]], list[StreamEvent]]:
    """The client's bytes, the encoder's block state after each read, and the events read."""
    req = request()
    reader, parser, encoder = ANTHROPIC_WIRE.reader(req), SSEParser(), MessagesEncoder(req)
    first = raw.find(b"\n\n") + 2  # the stream's first event alone (``_first_apart``)
    reads, at = [raw[:first]], first
    for size in cuts:
        reads.append(raw[at : at + size])
        at += size
    reads.append(raw[at:])
    out, states, events = b"", [], []
    for chunk in reads:
        got = read(reader, parser, chunk, relay)
        events += got
        out += b"".join(encoder.event(ev) for ev in got)
        states.append((encoder.index, encoder.open, encoder.text_head, encoder.relayed))
    events += reader.finish()
    return out + b"".join(encoder.event(ev) for ev in reader.finish()) + encoder.end(), states, events


def parsed(out: bytes) -> list[tuple[str, JSON]]:
    return [(e.event or "", json.loads(e.data)) for e in SSEParser().feed(out)]


@given(KINDS, st.lists(st.integers(1, 400), max_size=8), st.sampled_from(["compact", "ascii", "spaced"]))
def test_relayed_runs_are_the_stream_decoding_gives(kinds: list[tuple[str, str]], cuts: list[int], style: str) -> None:
    events = stream(kinds)
    raw = b"".join(framed(e, style) for e in events)
    relayed, relayed_states, relayed_events = through(raw, cuts, relay=True)
    decoded, decoded_states, decoded_events = through(raw, cuts, relay=False)
    assert parsed(relayed) == parsed(decoded) == [(e["type"], e) for e in events]
    assert relayed_states == decoded_states
    if style == "compact":
        assert relayed == decoded == raw
    accounted = [ev for ev in relayed_events if isinstance(ev, Finish | UsageReport)]
    assert accounted == [ev for ev in decoded_events if isinstance(ev, Finish | UsageReport)]
    assert len(accounted) == 2


def test_a_read_of_content_events_is_one_frame_of_as_many_chunks() -> None:
    reader = ANTHROPIC_WIRE.reader(request())
    events = stream([("text", " a"), ("tool", "b")])
    raw = [framed(e, "compact") for e in events]
    assert reader.relay_run(b"".join(raw[1:4])) is None  # before the stream's first event: decoded
    reader.decode(events[0])
    run = reader.relay_run(b"".join(raw[1:]))
    assert run is not None
    frame, end = run
    assert isinstance(frame, Frame) and bytes(frame) == b"".join(raw[1:-2]) and end == len(frame)
    assert frame.chunks == len(raw) - 3  # the ping and both blocks' events; message_delta and stop are read


@pytest.mark.parametrize(
    "event",
    [
        b'event: content_block_delta\ndata: {"index":0,"type":"content_block_delta"}\n\n',  # its type not first
        b'event: content_block_delta\ndata: {"type":"content_block_stop","index":0}\n\n',  # a name it does not have
        b'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0}\r\n\r\n',  # CRLF framing
        b'event: content_block_delta\ndata: {"type":"content_block_delta",\ndata: "index":0}\n\n',  # two data lines
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}\n\n',
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"x"}}\n\n',
        b'data: {"type":"content_block_delta","index":0}\n\n',  # no event name
    ],
)
def test_events_the_run_does_not_take_are_read(event: bytes) -> None:
    reader = EventReader(relay=True)
    reader.decode(stream([])[0])
    assert reader.relay_run(event) is None

"""Which OpenAI-shaped chunks a same-format stream relays unchanged: content only, compact, after the
stream's first chunk; anything else is decoded (a false "no" costs speed, a false "yes" would skip a
finish, usage or error, so the tests lean on the second)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.http import HTTPUpstream, _first_apart
from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.core.response import Batch, Delta, Finish, Frame, StreamEvent, StreamStart, Then, Usage, UsageReport
from gateway.core.upstream import Call, Upstream
from gateway.dialects.friendli import FRIENDLI, FRIENDLI_2024
from gateway.dialects.octoai import OCTOAI
from gateway.dialects.octoai.egress import OctoAIWire
from gateway.dialects.openai.chunks import ACCOUNTED, ChunkDecoder
from gateway.dialects.openai.egress import OPENAI_WIRE
from gateway.dialects.openai.parse import parse
from gateway.dialects.sgp import SGP_V5
from gateway.dialects.sse import SSEParser
from gateway.routing.fanout import FanOut
from gateway.runtime.config import parse_config

HEAD = '{"id":"c","object":"text_completion","created":1,"model":"m",'
PLAIN = HEAD + '"choices":[{"index":0,"text":" hi","logprobs":null,"finish_reason":null}],"usage":null}'
IDS = PLAIN.replace('"finish_reason":null}', '"finish_reason":null,"token_ids":[7]}')  # vLLM's, when asked


def started(token_ids: bool = True) -> ChunkDecoder:
    decoder = ChunkDecoder(Operation.COMPLETION, relay=True, token_ids=token_ids)
    decoder.decode(json.loads(PLAIN))
    return decoder


def test_a_content_chunk_is_framed_unchanged() -> None:
    # what the client's style changes in it is the encoder's part (tests/unit/test_retouch.py)
    assert started().relay(PLAIN.encode()) == b"data: " + PLAIN.encode() + b"\n\n"


@pytest.mark.parametrize(
    "chunk",
    [
        HEAD + '"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}],"usage":null}',
        HEAD + '"choices":[{"index":0,"text":"a","finish_reason":null},{"index":1,"text":"","finish_reason":"stop"}]}',
        HEAD + '"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}',
        HEAD + '"choices":[{"index":0,"text":"a","finish_reason":null}],"usage": {"prompt_tokens":1}}',
        '{"error":{"message":"boom","type":"server_error"}}',
        HEAD + '"choices":[{"index":0, "text":"a", "finish_reason": null}]}',  # spaced: not recognised
        HEAD + '"choices":[{"index":0,"text":"a","finish_reason":null}]',  # cut short
    ],
)
def test_anything_but_plain_content_is_decoded(chunk: str) -> None:
    assert started().relay(chunk.encode()) is None


def test_text_that_spells_a_key_is_still_relayed_safely() -> None:
    # inside a string every quote is escaped, so a text cannot fake a key; it may only cost the fast path
    tricky = HEAD + '"choices":[{"index":0,"text":"\\"finish_reason\\":\\"stop\\"","finish_reason":null}]}'
    assert started().relay(tricky.encode()) is not None
    fooled = HEAD + '"choices":[{"index":0,"text":"error","finish_reason":null}]}'
    assert started().relay(fooled.encode()) is None


def test_the_first_chunk_and_non_relaying_decoders_decode() -> None:
    assert ChunkDecoder(Operation.COMPLETION, relay=True).relay(PLAIN.encode()) is None
    decoder = ChunkDecoder(Operation.COMPLETION)
    decoder.decode(json.loads(PLAIN))
    assert decoder.relay(PLAIN.encode()) is None


CHAT_2024 = {"model": "m", "messages": [{"role": "user", "content": "p"}], "stream": True}


def test_only_openai_shaped_client_streams_without_logprobs_ask_for_a_relay() -> None:
    body = {"model": "m", "prompt": "p", "stream": True}
    assert parse(Operation.COMPLETION, body).relay == "openai"
    assert SGP_V5.parse(Operation.COMPLETION, {**body, "model": "openai/m"}, "").relay == "openai"
    assert OCTOAI.parse(Operation.COMPLETION, body, "").relay == "openai"
    assert FRIENDLI.parse(Operation.COMPLETION, body, "serverless").relay == "openai"
    assert FRIENDLI_2024.parse(Operation.CHAT, CHAT_2024, "serverless").relay == "openai"
    # friendli-client's completion stream is 2024 lines, not chunks
    assert FRIENDLI_2024.parse(Operation.COMPLETION, body, "serverless").relay is None
    assert FRIENDLI.parse(Operation.COMPLETION, {**body, "logprobs": 1}, "serverless").relay is None
    assert parse(Operation.COMPLETION, {**body, "logprobs": 1}).relay is None
    assert parse(Operation.COMPLETION, {**body, "stream": False}).relay is None
    request = parse(Operation.COMPLETION, body)
    assert OPENAI_WIRE.reader(request).relaying
    assert not OctoAIWire().reader(request).relaying  # OpenAI-shaped, but another format
    assert not OPENAI_WIRE.reader(InternalRequest(Operation.COMPLETION, "m", stream=True)).relaying


def test_fanned_out_parts_are_never_relayed() -> None:
    # their streams are merged and re-indexed event by event
    sampling = Sampling(n=2, seeds=(1, 2))
    request = InternalRequest(Operation.COMPLETION, "m", prompts=("p",), sampling=sampling, stream=True, relay="openai")
    parts = FanOut(cast(Upstream, None))._parts(request)
    assert [(p.relay, p.sampling.seeds, p.sampling.n) for _, p in parts] == [(None, (1,), 1), (None, (2,), 1)]


class Parts:
    """An inner upstream whose every call ends with a marked last batch, as HTTPUpstream's may."""

    async def stream(self, request: InternalRequest, call: object) -> AsyncIterator[Batch]:
        yield Batch([StreamStart("c", 1, "m", None), Delta(0, "hi")])
        yield Batch([Finish(0, "length"), UsageReport(Usage(1, 2))], Then.END)


async def test_fanned_out_streams_end_on_one_marked_batch() -> None:
    # a part's last batch is not the merged stream's: only the merged end is marked
    sampling = Sampling(n=2, seeds=(1, 2))
    request = InternalRequest(Operation.COMPLETION, "m", prompts=("p",), sampling=sampling, stream=True)
    batches = [b async for b in FanOut(cast(Upstream, Parts())).stream(request, Call("r"))]
    assert [b.then for b in batches] == [Then.MORE] * (len(batches) - 1) + [Then.END]
    assert batches[-1].events == [UsageReport(Usage(2, 4))]  # summed over the two calls


# A network read can carry many chunks: the content chunks it opens with go out as one frame.


def sse(*chunks: str) -> bytes:
    return b"".join(b"data: " + c.encode() + b"\n\n" for c in chunks)


FINISH = HEAD + '"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}],"usage":null}'
USAGE = HEAD + '"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}'


def test_a_run_of_content_chunks_is_one_frame_up_to_what_must_be_decoded() -> None:
    read = sse(PLAIN, PLAIN, PLAIN, FINISH, USAGE) + b"data: [DONE]\n\n"
    assert started().relay_run(read) == (sse(PLAIN, PLAIN, PLAIN), len(sse(PLAIN, PLAIN, PLAIN)))
    partial = sse(PLAIN, PLAIN) + b"data: " + PLAIN.encode()[:20]  # the rest of the last one comes later
    assert started().relay_run(partial) == (sse(PLAIN, PLAIN), len(sse(PLAIN, PLAIN)))


# Keys a chunk may carry, in the spellings the run's scans must tell apart
KEYS = [
    '"finish_reason":null',
    '"finish_reason":"stop"',
    '"finish_reason": null',
    '"stop_reason":null',
    '"stop_reason":"</s>"',
    '"usage":null',
    '"usage":{"prompt_tokens":1}',
    '"usage" :null',
    '"error":null',
    '"error":{"message":"x"}',
    '"text":"\\"usage\\":{} \\"error\\":1 _reason\\":2"',  # spelled in a text: escaped, not keys
]


@given(st.lists(st.lists(st.sampled_from(KEYS), max_size=3), min_size=1, max_size=12))
def test_a_run_stops_before_the_first_event_that_must_be_decoded(events: list[list[str]]) -> None:
    chunks = [HEAD + '"choices":[{"index":0,' + ",".join(['"text":"x"', *keys]) + "}]}" for keys in events]
    read = sse(*chunks, FINISH)  # a finish always follows: a run never takes the whole read here

    def stops(chunk: str) -> bool:  # a key with a value (or vLLM's stop reason's) must be decoded
        return ACCOUNTED.search(chunk.encode()) is not None or '_reason":"' in chunk

    taken = next(i for i, chunk in enumerate([*chunks, FINISH]) if stops(chunk))
    run = started().relay_run(read)
    assert run == (None if taken == 0 else (sse(*chunks[:taken]), len(sse(*chunks[:taken]))))
    assert run is None or run[0].chunks == taken


@given(st.lists(st.sampled_from(KEYS), max_size=3))
def test_a_read_of_one_event_is_relayed_as_a_run_of_one_would_be(keys: list[str]) -> None:
    # a model server's read: one token's event, checked in one scan rather than the run's
    chunk = HEAD + '"choices":[{"index":0,' + ",".join(['"text":"x"', *keys]) + "}]}"
    stops = ACCOUNTED.search(chunk.encode()) is not None or '_reason":"' in chunk
    run = started().relay_run(sse(chunk))
    assert run == (None if stops else (sse(chunk), len(sse(chunk))))
    assert run is None or run[0].chunks == 1
    assert run == started().relay_run(sse(chunk, FINISH))  # the run's scans come to the same


def test_a_stream_s_next_token_is_relayed_by_the_last_one_s_shape() -> None:
    decoder = started(token_ids=False)
    token = PLAIN.replace(" hi", " there")
    assert decoder.relay_run(sse(PLAIN)) == (sse(PLAIN), len(sse(PLAIN)))
    assert decoder.shape == (sse(PLAIN)[: sse(PLAIN).index(b" hi")], sse(PLAIN)[sse(PLAIN).index(b" hi") + 3 :])
    assert decoder.relay_run(sse(token)) == (sse(token), len(sse(token)))
    assert decoder.relay_run(sse(FINISH)) is None  # another shape: the full check, which stops it
    quoted = PLAIN.replace(" hi", '\\"finish_reason\\":\\"stop\\"')
    assert decoder.relay_run(sse(quoted)) == (sse(quoted), len(sse(quoted)))  # not plain: the full check
    with_ids = started(token_ids=True)  # each chunk's ids differ too: the shape is cut around them
    assert with_ids.relay_run(sse(IDS)) is not None and with_ids.shape is None and with_ids.ids_shape is not None
    token = IDS.replace(" hi", " there").replace("[7]", "[8,9]")
    assert with_ids.relay_run(sse(token)) == (sse(token), len(sse(token)))


def test_a_frame_that_lends_its_shape_carries_it_and_the_next_tokens_come_as_read() -> None:
    decoder = started(token_ids=False)
    run = decoder.relay_run(sse(PLAIN))
    assert run is not None and run[0].shape == decoder.shape is not None  # the encoder learns it from the frame
    assert decoder.same_shape(sse(PLAIN.replace(" hi", " there, you")))
    for other in (
        PLAIN.replace(" hi", 'a\\"b'),  # not plain: a quote, a backslash
        PLAIN.replace(" hi", "a\\nb"),
        PLAIN.replace('"finish_reason":null', '"finish_reason":"stop"'),  # another shape
    ):
        assert not decoder.same_shape(sse(other))
    assert not decoder.same_shape(sse(PLAIN, PLAIN))  # two events
    assert not decoder.same_shape(sse(PLAIN)[:-1])  # cut short
    assert not decoder.same_shape(b"")
    assert decoder.relay_run(sse(FINISH)) is None and decoder.shape is not None  # a decoded event keeps it
    with_ids = started(token_ids=True)
    run = with_ids.relay_run(sse(IDS))
    assert run is not None and run[0].shape is not None and len(run[0].shape) == 3 and with_ids.ids_shape is not None
    assert with_ids.same_shape(sse(IDS.replace(" hi", " there, you").replace("[7]", "[12,345]")))
    for other in (
        IDS.replace("[7]", "[]"),  # no id, not an id, ids that run into another key
        IDS.replace("[7]", "[7,]"),
        IDS.replace("[7]", '[7],"x":[1'),
        IDS.replace(" hi", 'a\\"b'),  # not plain
        IDS.replace(" hi", '\\",\\"token_ids\\":[1'),
        PLAIN,  # no ids where they were
    ):
        assert not with_ids.same_shape(sse(other))
    without = started(token_ids=True)  # asked for ids, a chunk without: the plain shape
    run = without.relay_run(sse(PLAIN))
    assert run is not None and run[0].shape == without.shape is not None and without.ids_shape is None


def test_a_text_not_closed_as_a_json_value_lends_no_shape() -> None:
    # the encoder relies on what follows the text: a comma or a brace, never another key's quote
    decoder = started(token_ids=False)
    odd = HEAD + '"choices":[{"index":0,"text":" hi":null}]}'
    run = decoder.relay_run(sse(odd))
    assert run is not None and run[0].shape is None and decoder.shape is None


def relayable(chunk: str) -> bool:
    """What the decoder must see, read as JSON: a finish or stop reason, usage or an error."""
    data = json.loads(chunk)
    choices = data.get("choices") or []
    reasons = [c.get(k) for c in choices for k in ("finish_reason", "stop_reason")]
    return all(v is None for v in [*reasons, data.get("usage"), data.get("error")])


TOKENS = st.sampled_from(["x", "", "é", 'a"b', "a\\", "usage", "\n", "}\n\n"])


@given(st.lists(st.tuples(TOKENS, st.lists(st.sampled_from(KEYS), max_size=2)), min_size=1, max_size=8))
def test_one_event_reads_in_a_row_are_relayed_only_when_they_may_be(events: list[tuple[str, list[str]]]) -> None:
    # the stream's last event relayed alone lends its shape to the next: only a plain text may differ
    decoder = started(token_ids=False)
    for text, keys in events:
        chunk = HEAD + '"choices":[{"index":0,' + ",".join([f'"text":{json.dumps(text)}', *keys]) + '}],"usage":null}'
        run = decoder.relay_run(sse(chunk))
        if started().relay_run(sse(chunk)) is not None:  # what the full check relays, the shape does too
            assert run == (sse(chunk), len(sse(chunk)))
        if run is not None:
            assert relayable(chunk) and run[0] == sse(chunk) and run[0].chunks == 1


@pytest.mark.parametrize(
    "read",
    [
        sse(FINISH, PLAIN),  # opens with an event to decode
        b"data: [DONE]\n\n",
        b"data: " + PLAIN.encode()[:20],  # no whole event yet
        sse(PLAIN).replace(b"\n", b"\r\n"),  # CRLF framing
        sse(PLAIN) + b": keep-alive\n\n" + sse(PLAIN),  # a comment inside the run
        sse(PLAIN) + b"event: error\n" + sse(PLAIN),  # a named event
        b"data: {\ndata: }\n\n",  # one event's data over two lines
        sse(PLAIN) + b"\n" + sse(PLAIN),  # a stray blank line
        sse(HEAD + '"choices":[]', PLAIN),  # one that is not an object
        sse(HEAD + '"choices":[]'),  # the same, alone in its read
        b": keep-alive }\n\n",  # a comment alone
    ],
)
def test_a_run_that_is_not_plain_one_line_events_takes_the_parser(read: bytes) -> None:
    assert started().relay_run(read) is None


def test_no_run_before_the_first_chunk_or_without_a_relay() -> None:
    assert ChunkDecoder(Operation.COMPLETION, relay=True).relay_run(sse(PLAIN, PLAIN)) is None
    decoder = ChunkDecoder(Operation.COMPLETION)
    decoder.decode(json.loads(PLAIN))
    assert decoder.relay_run(sse(PLAIN, PLAIN)) is None


def test_a_whole_stream_in_one_read_decodes_its_first_and_last_chunks_and_runs_the_rest() -> None:
    cfg = parse_config({"models": [{"name": "m", "targets": [{"provider": "openai", "base_url": "http://u"}]}]})
    upstream = HTTPUpstream(cfg.models[0].targets[0], "m", OPENAI_WIRE)
    request = parse(Operation.COMPLETION, {"model": "m", "prompt": "p", "stream": True})
    decoder, parser, batch = OPENAI_WIRE.reader(request), SSEParser(), cast(list[StreamEvent], [])
    read = sse(PLAIN, PLAIN, PLAIN, FINISH, USAGE) + b"data: [DONE]\n\n"
    pieces = _first_apart(read[:-5], decoder)  # "[DONE]" cut short
    assert pieces == (sse(PLAIN), read[len(sse(PLAIN)) : -5])  # the first chunk goes out on its own
    assert [upstream._take(piece, parser, decoder, batch) for piece in pieces] == [False, False]
    assert [type(e).__name__ for e in batch] == ["StreamStart", "Delta", "Frame", "Finish"]
    assert batch[2] == sse(PLAIN, PLAIN)
    assert cast(Frame, batch[2]).chunks == 2  # counted where it was cut, for the log and the token count
    assert upstream._take(read[-5:], parser, decoder, batch) is True
    assert isinstance(batch[-1], UsageReport) and batch[-1].usage.completion_tokens == 2


def test_a_stream_s_first_chunk_goes_out_apart_from_the_rest_of_its_read() -> None:
    read = sse(PLAIN, PLAIN, FINISH)
    first = len(sse(PLAIN))
    decoding = ChunkDecoder(Operation.COMPLETION)
    assert _first_apart(read, decoding) == (read[:first], read[first:])
    assert _first_apart(sse(PLAIN), decoding) == (sse(PLAIN),)  # nothing more in this read
    assert _first_apart(b"data: {", decoding) == (b"data: {",)  # no whole event yet
    relaying = ChunkDecoder(Operation.COMPLETION, relay=True)
    assert _first_apart(read, relaying) == (read[:first], read[first:])  # relayed: the rest is work too
    decoding.decode(json.loads(PLAIN))
    assert _first_apart(read, decoding) == (read,)  # past the first chunk

"""A stream cut before its usage came is settled by an upper bound of what it carried: chunks relayed
as they came (frames of one or many events, and ``Token``s in a frame's shape) and decoded deltas
count their texts' bytes, as the prompt's bound does, never a token a chunk (a chunk may carry many)."""

from __future__ import annotations

import json
import logging

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.core.response import Delta, Frame
from gateway.dialects.openai.chunks import ChunkDecoder
from gateway.limits.plan import NO_LIMITS, planned, unlimited
from gateway.web.record import Backlog, RequestLog

HEAD = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
# the texts a model writes: plain words mostly, quotes, escapes, newlines and wide characters too
TEXTS = st.lists(
    st.text(alphabet=st.sampled_from([*"abc xyz", '"', "\\", "\n", "é", "🙂", "\x00"]), max_size=12), max_size=30
)


def event(text: str, **choice: object) -> bytes:
    chunk = {**HEAD, "choices": [{"index": 0, "delta": {"content": text, **choice}, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def relayed(texts: list[str], reads: list[int], paths: list[str] | None = None) -> RequestLog:
    """``texts`` a chunk each, read as the adapter reads them (``reads``: events per network read): a
    read in the last frame's shape a ``Token``, whole events a ``Frame``, else decoded (``paths``)."""
    decoder = ChunkDecoder(Operation.CHAT, relay=True, token_ids=False)  # ids asked: no shapes (so no Tokens)
    decoder.decode(json.loads(event("", role="assistant")[6:]))
    log = RequestLog(Backlog(), logging.getLogger("test"), "rid", "openai")
    paths = [] if paths is None else paths
    reads = list(reads)
    while texts:
        size = reads.pop(0) if reads else 1
        now, texts = texts[:size], texts[size:]
        read = b"".join(event(t) for t in now)
        if decoder.same_shape(read):
            log.token(len(read))
            paths.append("token")
        elif (run := decoder.relay_run(read)) is not None and run[1] == len(read):
            log.observe([run[0]])
            paths.append("frame")
        else:
            log.observe([Delta(0, t) for t in now])
            paths.append("decoded")
    return log


@given(texts=TEXTS, reads=st.lists(st.integers(1, 5), max_size=30))
def test_the_most_a_relayed_stream_carried_bounds_its_texts_bytes(texts: list[str], reads: list[int]) -> None:
    """Byte-level BPE spends at most a token a byte; a chunk with no text may still carry a token."""
    log = relayed(texts, reads)
    assert log.counted() >= sum(max(1, len(t.encode())) for t in texts) >= log.streamed == len(texts)


def test_the_property_runs_the_relays_paths() -> None:
    """Tokens in a frame's shape, frames of one and of many events: not only the decoder's fallback."""
    paths: list[str] = []
    log = relayed(["ab", "cd", "e\nf", 'g"h', "ij", "kl", "mn"], [3, 1, 1, 1, 1], paths)
    assert paths == ["frame", "frame", "frame", "token", "token"]  # 3 events, 1 quoted, 1 plain, 2 in its shape
    assert log.counted() >= 2 + 2 + 3 + 3 + 2 + 2 + 2


def test_a_cut_stream_settles_the_bound_within_the_worst_case() -> None:
    request = InternalRequest(Operation.CHAT, "m", sampling=Sampling(max_tokens=20))
    plan = planned("t", "k", NO_LIMITS, request, "lease")
    log = relayed(["word " * 3] * 4, [])  # 4 chunks, 60 bytes: past max_tokens
    assert log.usage(plan) == (plan.prompt_estimate, 20)
    short = relayed(["ab"], [])
    assert short.usage(plan) == (plan.prompt_estimate, short.counted()) and short.counted() > short.streamed


def test_an_unlimited_team_s_cut_stream_settles_within_its_max_tokens() -> None:
    """Nothing reserved, but the client's own bound still holds: its usage and cost are summed too (a
    cut stream of 9 tokens with max_tokens 16 was settled 64 completion tokens, its bytes' bound)."""
    bounded = InternalRequest(Operation.CHAT, "m", sampling=Sampling(max_tokens=20, n=2))
    log = relayed(["word " * 3] * 12, [])  # 12 chunks, 180 bytes: past 2 choices of max_tokens
    assert log.usage(unlimited("t", "k", bounded)) == (unlimited("t", "k", bounded).prompt_estimate, 40)
    free = InternalRequest(Operation.CHAT, "m")  # no bound of the client's: the texts' bound alone
    assert log.usage(unlimited("t", "k", free))[1] == log.counted() > 40


def test_decoded_deltas_count_their_texts_or_their_ids() -> None:
    log = RequestLog(Backlog(), logging.getLogger("test"), "rid", "openai")
    log.observe([Delta(0, "hello world"), Delta(0, "x", token_ids=(1, 2, 3)), Delta(0, "", tool_calls=({"a": 1},))])
    assert log.streamed == 1 + 3 + 1
    assert log.counted() >= 11 + 3 + len('[{"a": 1}]')


def test_a_frame_counts_each_generated_string_once() -> None:
    text = 'say "hi"\n'
    log = RequestLog(Backlog(), logging.getLogger("test"), "rid", "openai")
    log.observe([Frame.of(event(text) * 2, 2)])
    assert 2 * len(text.encode()) <= log.counted() <= 2 * (len(json.dumps(text)) + 1) and log.streamed == 2


def test_anthropic_events_count_their_text_tool_input_and_thinking() -> None:
    """An Anthropic stream relayed to an Anthropic client: each delta's generated string counts."""
    deltas = [
        ("text_delta", "text", "héllo"),
        ("input_json_delta", "partial_json", '{"a": 1'),
        ("thinking_delta", "thinking", "hm"),
    ]
    log = RequestLog(Backlog(), logging.getLogger("test"), "rid", "anthropic")
    for kind, key, text in deltas:
        data = {"type": "content_block_delta", "index": 0, "delta": {"type": kind, key: text}}
        log.observe([Frame.of(b"event: content_block_delta\ndata: " + json.dumps(data).encode() + b"\n\n", 1)])
    assert log.counted() >= sum(len(t.encode()) for _, _, t in deltas) + 3

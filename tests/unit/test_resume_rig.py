"""The real-vLLM resume rig's relay (``tests/vllm/resume_rig.py``) cuts a chunked SSE answer before
the chunk of its first event past ``BREAK_AT`` tokens, however the replica groups its tokens into
events and however the bytes arrive in reads. (It once counted events: a starved API server merges
steps into one event, and a 300-token answer passed whole in under 50.)"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tests.vllm.resume_rig import BREAK_AT, TokenCounter, tokens

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(ids: int) -> bytes:
    event = b'data: {"choices":[{"text":"t","token_ids":[' + b",".join([b"7"] * ids) + b"]}]}\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def answer(sizes: list[int]) -> bytes:
    return HEAD + b"".join(chunk(n) for n in sizes) + b"0\r\n\r\n"


def relayed(reads: list[bytes]) -> bytes | None:
    """What the relay lets through when the answer comes in ``reads``; None: no cut."""
    counter, out = TokenCounter(), b""
    for data in reads:
        if (cut := counter.feed(data)) is not None:
            return out + data[:cut]
        out += data
    return None


def read_in(whole: bytes, splits: list[int]) -> list[bytes]:
    bounds = [0, *sorted({s for s in splits if 0 < s < len(whole)}), len(whole)]
    return [whole[a:b] for a, b in itertools.pairwise(bounds)]


@given(st.lists(st.integers(1, 40), min_size=1, max_size=40), st.lists(st.integers(1, 20_000), max_size=40))
def test_the_cut_is_before_the_first_event_past_the_tokens_however_it_is_read(
    sizes: list[int], splits: list[int]
) -> None:
    whole = answer(sizes)
    got = relayed(read_in(whole, splits))
    passed = list(itertools.accumulate(sizes))
    reached = next((k for k, total in enumerate(passed) if total >= BREAK_AT), None)
    if reached is None or reached == len(sizes) - 1:  # no event after the one that reaches it
        assert got is None
        return
    want = len(HEAD) + sum(len(chunk(n)) for n in sizes[: reached + 1])
    assert got is not None and whole.startswith(got)
    # the chunk of the cut may have begun in an earlier read (already sent): never more than that
    assert want <= len(got) < want + len(chunk(sizes[reached + 1]))
    if all(not (want < s < want + len(chunk(sizes[reached + 1]))) for s in splits):
        assert len(got) == want


def test_one_token_an_event_is_cut_after_break_at_events() -> None:
    got = relayed([answer([1] * (BREAK_AT + 20))])
    assert got is not None and got.count(b"data: ") == BREAK_AT


def test_a_short_answer_is_never_cut() -> None:
    assert relayed([answer([1] * (BREAK_AT - 1))]) is None


def test_an_event_without_ids_is_one_token_and_a_role_event_none() -> None:
    assert tokens(b'data: {"choices":[{"delta":{"role":"assistant"},"token_ids":[]}]}') == 0
    assert tokens(b"data: [DONE]") == 1
    assert tokens(b'data: {"choices":[{"text":"t","token_ids":[1,2,3]}]}') == 3

"""The real-vLLM resume rig's relay (``tests/vllm/resume_rig.py``) cuts a chunked SSE answer before
the chunk of its first event past ``BREAK_AT`` tokens, or before the event that finishes the answer
where that comes first, however the replica groups its tokens into events and however the bytes
arrive in reads. (It once counted events: a starved API server merges steps into one event, and a
300-token answer passed whole in under 50. Then a merged event reached ``BREAK_AT`` and finished the
answer at once: the fault came after the finish, and there was nothing to resume.)"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tests.vllm.resume_rig import BREAK_AT, TokenCounter, finishes, tokens

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(ids: int, finish: bool = False) -> bytes:
    reason = b'"length"' if finish else b"null"
    event = b'data: {"choices":[{"text":"t","token_ids":[%s],"finish_reason":%s}]}\n\n' % (
        b",".join([b"7"] * ids),
        reason,
    )
    return b"%x\r\n%s\r\n" % (len(event), event)


def chunks(sizes: list[int]) -> list[bytes]:
    """An answer's event chunks: the last one finishes it."""
    return [chunk(n, finish=i == len(sizes) - 1) for i, n in enumerate(sizes)]


def answer(sizes: list[int]) -> bytes:
    return HEAD + b"".join(chunks(sizes)) + b"0\r\n\r\n"


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
def test_the_cut_is_past_the_tokens_and_before_the_finish_however_it_is_read(
    sizes: list[int], splits: list[int]
) -> None:
    whole = answer(sizes)
    got = relayed(read_in(whole, splits))
    passed = list(itertools.accumulate(sizes))
    reached = next((k for k, total in enumerate(passed) if total >= BREAK_AT), len(sizes) - 1)
    # before the event after the one that reaches BREAK_AT, or before the finishing one if sooner
    before = min(reached + 1, len(sizes) - 1)
    if before == 0:  # one event holds the whole answer: nothing to cut mid-answer
        assert got is None
        return
    parts = chunks(sizes)
    want = len(HEAD) + sum(map(len, parts[:before]))
    assert got is not None and whole.startswith(got)
    # the chunk of the cut may have begun in an earlier read (already sent): never more than that
    assert want <= len(got) < want + len(parts[before])
    if all(not (want < s < want + len(parts[before])) for s in splits):
        assert len(got) == want
    assert b'"finish_reason":"length"}]}\n\n' not in got  # a finish's start may pass, never the event


def test_one_token_an_event_is_cut_after_break_at_events() -> None:
    got = relayed([answer([1] * (BREAK_AT + 20))])
    assert got is not None and got.count(b"data: ") == BREAK_AT


def test_a_short_answer_is_cut_before_its_finish() -> None:
    got = relayed([answer([1] * (BREAK_AT - 1))])
    assert got is not None and got.count(b"data: ") == BREAK_AT - 2


def test_a_merged_finish_past_break_at_is_cut_before_it() -> None:
    """The CI case: the steps left merged into the event that reaches ``BREAK_AT`` and finishes."""
    got = relayed([answer([1] * 40 + [260])])
    assert got is not None and got.count(b"data: ") == 40


def test_a_finish_without_ids_is_no_finish_to_cut_before() -> None:
    assert not finishes(b'data: {"choices":[{"delta":{},"finish_reason":"stop","token_ids":[]}]}')
    assert finishes(b'data: {"choices":[{"delta":{"content":"x"},"finish_reason": "stop","token_ids":[5]}]}')
    assert not finishes(b'data: {"choices":[{"text":"t","token_ids":[1],"finish_reason":null}]}')


def test_an_event_without_ids_is_one_token_and_a_role_event_none() -> None:
    assert tokens(b'data: {"choices":[{"delta":{"role":"assistant"},"token_ids":[]}]}') == 0
    assert tokens(b"data: [DONE]") == 1
    assert tokens(b'data: {"choices":[{"text":"t","token_ids":[1,2,3]}]}') == 3

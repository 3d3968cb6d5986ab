"""The real-vLLM resume rig's relay (``tests/vllm/resume_rig.py``) cuts a chunked SSE answer before
the chunk of its ``BREAK_AT``th event, however the bytes arrive in reads: the break it makes is exact."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tests.vllm.resume_rig import BREAK_AT, _cut

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(i: int) -> bytes:
    event = b'data: {"choices":[{"text":"t%d"}]}\n\n' % i
    return b"%x\r\n%s\r\n" % (len(event), event)


ANSWER = HEAD + b"".join(chunk(i) for i in range(BREAK_AT + 20)) + b"0\r\n\r\n"
WANT = len(HEAD) + sum(len(chunk(i)) for i in range(BREAK_AT - 1))  # bytes before the BREAK_AT'th chunk


def relayed(reads: list[bytes]) -> bytes | None:
    """What the relay lets through when the answer comes in ``reads``; None: no cut."""
    out, events, tail = b"", 0, b""
    for data in reads:
        cut, events, tail = _cut(tail + data, len(tail), events)
        if cut is not None:
            return out + data[:cut]
        out += data
    return None


@given(st.lists(st.integers(1, len(ANSWER) - 1), max_size=40, unique=True))
def test_the_cut_is_before_the_chunk_of_the_break_at_event_however_it_is_read(splits: list[int]) -> None:
    bounds = [0, *sorted(splits), len(ANSWER)]
    reads = [ANSWER[a:b] for a, b in itertools.pairwise(bounds)]
    got = relayed(reads)
    assert got is not None
    # the chunk of the cut may have begun in an earlier read (already sent): never more than that
    assert len(got) <= WANT + len(chunk(BREAK_AT - 1)) and ANSWER.startswith(got)
    if all(not (WANT < b < WANT + len(chunk(BREAK_AT - 1))) for b in bounds):
        assert got == ANSWER[:WANT]


def test_a_short_answer_is_never_cut() -> None:
    short = HEAD + b"".join(chunk(i) for i in range(BREAK_AT - 1)) + b"0\r\n\r\n"
    assert relayed([short]) is None

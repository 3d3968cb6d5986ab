"""The SSE reader takes any framing an upstream may send."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.dialects.sse import Event, SSEParser


@pytest.fixture(autouse=True, params=[SSEParser.LONG, 3], ids=["long-64k", "long-3"])
def long_line(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test also runs with lines and events past 3 bytes waiting in pieces (the quadratic guard),
    which a real stream reaches only past 64 KiB."""
    saved = SSEParser.LONG
    SSEParser.LONG = request.param
    yield
    SSEParser.LONG = saved


def fed_in_pieces(raw: bytes, data: st.DataObject) -> list[Event]:
    """What a parser makes of ``raw`` fed in pieces cut where Hypothesis chooses, then closed."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    parser, events, last = SSEParser(), [], 0
    for cut in [*cuts, len(raw)]:
        events += parser.feed(raw[last:cut])
        last = cut
    return events + parser.close()


def test_events_comments_names_crlf() -> None:
    raw = b': ping\r\ndata: {"a":1}\r\n\r\nevent: error\ndata: x\ndata: y\n\ndata: [DONE]\n\n'
    assert SSEParser().feed(raw) == [Event(b'{"a":1}'), Event(b"x\ny", "error"), Event(b"[DONE]")]


def test_unterminated_last_event_counts_at_close() -> None:
    p = SSEParser()
    assert p.feed(b"data: tail") == []
    assert p.close() == [Event(b"tail")]


@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=20),
        max_size=8,
    ),
    st.sampled_from([b"\n", b"\r\n"]),
    st.data(),
)
def test_any_split_gives_the_same_events(payloads: list[str], eol: bytes, data: st.DataObject) -> None:
    raw = b"".join(b"data: " + p.encode() + eol + eol for p in payloads)
    assert [e.data.decode() for e in fed_in_pieces(raw, data)] == payloads


LINE = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)
KIND = st.one_of(
    st.tuples(st.just("data"), LINE),
    st.tuples(st.just("lines"), st.lists(LINE, min_size=2, max_size=3)),
    st.tuples(st.just("named"), st.text(alphabet="abcxyz_", min_size=1, max_size=6), LINE),
    st.tuples(st.just("comment"), LINE, LINE),
    st.tuples(st.just("ping"), LINE),
    st.tuples(st.just("nospace"), LINE),
)


@given(st.lists(KIND, max_size=10), st.sampled_from([b"\n", b"\r\n"]), st.data())
def test_one_line_events_and_every_other_framing_mixed_in_any_split(
    kinds: list[tuple[object, ...]], eol: bytes, data: st.DataObject
) -> None:
    """Reads of one-line events take the event-by-event path; anything else in a read sends the whole
    read through the line reader: the events are the same, however the stream is cut."""
    raw, want = b"", []
    for kind, *parts in kinds:
        if kind == "data":
            raw += b"data: " + str(parts[0]).encode() + eol + eol
            want.append(Event(str(parts[0]).encode()))
        elif kind == "lines":
            lines = [str(p).encode() for p in parts[0]]  # type: ignore[attr-defined]
            raw += b"".join(b"data: " + line + eol for line in lines) + eol
            want.append(Event(b"\n".join(lines)))
        elif kind == "named":
            raw += b"event: " + str(parts[0]).encode() + eol + b"data: " + str(parts[1]).encode() + eol + eol
            want.append(Event(str(parts[1]).encode(), str(parts[0])))
        elif kind == "comment":  # a comment line, then a one-line event
            raw += b": " + str(parts[0]).encode() + eol + b"data: " + str(parts[1]).encode() + eol + eol
            want.append(Event(str(parts[1]).encode()))
        elif kind == "ping":  # a keep-alive comment on its own: no event
            raw += b": " + str(parts[0]).encode() + eol + eol
        else:  # "data:" without the space: the same value (a space after the colon is dropped, not needed)
            payload = str(parts[0]).encode()
            raw += b"data:" + payload + eol + eol
            want.append(Event(payload[1:] if payload.startswith(b" ") else payload))
    assert fed_in_pieces(raw, data) == want


def test_pending_counts_the_unfinished_event_only() -> None:
    p = SSEParser()
    assert p.feed(b"data: a\n\ndata: bb") == [Event(b"a")] and p.pending == len(b"data: bb")
    assert p.feed(b"b\ndata: cc\n") == [] and p.pending == len(b"data: bbb\ndata: cc\n")
    assert p.feed(b"\n") == [Event(b"bbb\ncc")] and p.pending == 0
    # read line by line (a named event first): the unfinished event's lines wait as data, counted as read
    assert p.feed(b"event: e\ndata: a\n\ndata: b\ndata: cc\n") == [Event(b"a", "e")]
    assert p.pending == len(b"data: b\ndata: cc\n")
    assert p.feed(b"\n") == [Event(b"b\ncc")] and p.pending == 0
    # empty data lines hold a list entry each: they count as the bytes they came in
    assert p.feed(b"event: e\ndata: a\n\n" + b"data:\n" * 1000) == [Event(b"a", "e")] and p.pending == 6000

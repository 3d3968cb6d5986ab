"""The SSE reader takes any framing an upstream may send."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.dialects.sse import Event, SSEParser


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
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    parser, events, last = SSEParser(), [], 0
    for cut in [*cuts, len(raw)]:
        events += parser.feed(raw[last:cut])
        last = cut
    events += parser.close()
    assert [e.data.decode() for e in events] == payloads

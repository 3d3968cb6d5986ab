"""The one place the gateway relies on aiohttp's private parts: ``drain_whole`` has an upstream
stream's body reader take every buffered chunk in one join, and ``EventStream`` sends an SSE
answer's head with its first event. Nothing else may reach into aiohttp;
anything added here needs its own A/B measurement, a check in ``tests/unit/test_aiohttp_tuning.py``
and a note of the upstream change that would retire it.

Checked against aiohttp ``CHECKED_AGAINST`` (CPython 3.11): ``StreamReader._read_nowait(-1)`` (what
``readany()`` returns) takes the buffered chunks one by one through ``_read_nowait_chunk``, and for
each pays a popleft, the counters, a trim of the chunk-split queue, a low-water check and, below the
low-water mark, a ``resume_reading()`` on the connection, which feeds the parser ``b""`` and resumes a
transport that is reading anyway. An SSE upstream writes one HTTP chunk per event, so a read under
load holds dozens. ``WholeReads`` joins them once and does that bookkeeping once.

aiohttp compiles its parser's reader class in, so the class is changed on the reader the parser
made (``drain_whole``). An aiohttp whose reader lacks a name relied on here keeps its own reader,
which returns the same bytes; the test fails on any other aiohttp version until this is checked
again (tests and the A/B benchmark, docs/performance.md).

``EventStream`` sets ``StreamResponse._send_headers_immediately`` to False, as aiohttp (3.12 on,
aio-libs/aiohttp#10991) does for whole answers: the head waits for the first write and leaves in the
same send, one send per stream fewer. The answer is prepared only once the first event is in hand,
so the head is never held back waiting on the upstream. Retired by: a public way to ask for it
(a ``StreamResponse`` argument, or ``prepare()`` taking the first bytes).

Retired by: aiohttp's ``StreamReader._read_nowait(-1)`` draining its buffer in one join with the
bookkeeping done once, or its protocol's ``resume_reading()`` returning at once when reading is
not paused. Either, upstream, makes this module unnecessary.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.streams import StreamReader

CHECKED_AGAINST = "3.14.5"

# What WholeReads reads and writes of aiohttp's reader (private names)
USES = frozenset(
    {
        "_buffer",
        "_buffer_offset",
        "_timer",
        "_size",
        "_cursor",
        "_http_chunk_splits",
        "_low_water",
        "_low_water_chunks",
        "_protocol",
    }
)
SUPPORTED = USES.issubset(getattr(StreamReader, "__slots__", ()))


class WholeReads(StreamReader):
    """``readany()`` that takes every buffered chunk in one join, with ``_read_nowait_chunk``'s
    bookkeeping done once for all of them; any other read is aiohttp's own."""

    __slots__ = ()

    def _read_nowait(self, n: int) -> bytes:
        buffer = self._buffer
        if n != -1 or len(buffer) < 2 or self._buffer_offset:
            return super()._read_nowait(n)
        self._timer.assert_timeout()
        # Only what is buffered now, as aiohttp's own (aio-libs/aiohttp#12828): a resume below may
        # refill the buffer re-entrantly, and that waits for the next read.
        data = b"".join(buffer)
        buffer.clear()
        self._size -= len(data)
        self._cursor = cursor = self._cursor + len(data)
        splits = self._http_chunk_splits
        while splits and splits[0] < cursor:
            splits.popleft()
        if self._size < self._low_water and (splits is None or len(splits) < self._low_water_chunks):
            self._protocol.resume_reading()
        return data


def drain_whole(content: StreamReader) -> None:
    """Has ``content`` (an upstream response's body) read as ``WholeReads`` does. A body that is not a
    plain reader (an empty one), or an aiohttp without what ``WholeReads`` uses, reads as before."""
    if SUPPORTED and type(content) is StreamReader:
        content.__class__ = WholeReads


class EventStream(web.StreamResponse):
    """An SSE answer whose head leaves with its first write (module docstring)."""

    _send_headers_immediately = False

"""The one place the gateway relies on libraries' internals or below-the-API paths. Each use is
here with its measured reason and the change upstream that would retire it; nothing else may reach
into a library. Each is checked by ``tests/unit/test_internals.py`` against the library versions in
``CHECKED``, which are ``pyproject.toml``'s ranges: that test fails on any other version until the use
is checked again (its tests and ``python -m benchmarks.internals`` or the A/B named below). Anything
added here needs the same: an A/B measurement, a check in that test, a retiring change, a range.

**aiohttp.** ``drain_whole`` has an upstream stream's body reader take every buffered chunk in one
join, and ``EventStream`` sends an SSE answer's head with its first event.
``StreamReader._read_nowait(-1)`` (what ``readany()`` returns) takes the buffered chunks one by one
through ``_read_nowait_chunk``, and for each pays a popleft, the counters, a trim of the chunk-split
queue, a low-water check and, below the low-water mark, a ``resume_reading()`` on the connection,
which feeds the parser ``b""`` and resumes a transport that is reading anyway. An SSE upstream writes
one HTTP chunk per event, so a read under load holds dozens. ``WholeReads`` joins them once and does
that bookkeeping once (without it 1.87M -> 2.42M instructions per 64-event stream, +10 to +17% CPU
per stream; docs/performance.md). aiohttp compiles its parser's reader class in, so the class is
changed on the reader the parser made (``drain_whole``). An aiohttp whose reader lacks a name relied
on here keeps its own reader, which returns the same bytes. Retired by: aiohttp's
``StreamReader._read_nowait(-1)`` draining its buffer in one join with the bookkeeping done once, or
its protocol's ``resume_reading()`` returning at once when reading is not paused.

``EventStream`` sets ``StreamResponse._send_headers_immediately`` to False, as aiohttp (3.12 on,
aio-libs/aiohttp#10991) does for whole answers: the head waits for the first write and leaves in the
same send, one send per stream fewer. The answer is prepared only once the first event is in hand,
so the head is never held back waiting on the upstream. Retired by: a public way to ask for it
(a ``StreamResponse`` argument, or ``prepare()`` taking the first bytes).

**redis-py.** ``RawConnection`` is one connection borrowed for good from a client's pool, on which
``gateway.limits.channel`` sends script calls packed here as RESP (``evalsha_head``) and reads the
replies in order: below the client's command API. Per call, the client's own cost (a pipeline
object, a pool checkout, each argument through the encoder, a loop timer per reply read) is as
large as the kernel's; packed once, the channel's group commit costs a fraction of a pipeline's
(``python -m benchmarks.internals``; docs/performance.md). redis-py still connects, authenticates,
selects the database and parses the replies (hiredis). Retired by: a redis-py pipeline whose
per-command cost is within noise of this path, or a public way to send pre-packed commands.

CPython's private modules: none. Keys were hashed by CPython's own ``_sha2``/``_sha256``; measured
against ``hashlib.sha256`` it saved 1.6k of 900k instructions per request (docs/performance.md), so
``gateway.policy.auth`` uses hashlib.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader
from redis.exceptions import ResponseError

# The library ranges each use here was checked against: pyproject.toml pins the same ranges
CHECKED = {"aiohttp": ">=3.14.5,<3.15", "redis": ">=7.4,<8"}

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


def evalsha_head(sha: bytes, keys: list[bytes], args: int) -> bytes:
    """A script call in RESP (an array of bulk strings) up to its ``args`` arguments: the same for
    every call of the script on these keys, so a caller may pack it once."""
    parts = (b"EVALSHA", sha, b"%d" % len(keys), *keys)
    return b"*%d\r\n" % (len(parts) + args) + b"".join([b"$%d\r\n%s\r\n" % (len(p), p) for p in parts])


def bulk(arg: bytes) -> bytes:
    """One argument of a packed command, in RESP."""
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


class RawConnection:
    """One connection of a redis-py client's pool, held for good (the pool's ``disconnect()`` at
    shutdown closes it with the rest): packed commands go out in one send, replies come back one
    read each. A failed send or read leaves redis-py's connection disconnected; the next send
    connects again."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        # redis-py's per-read bound (the configured Redis timeout): the caller's per round trip
        self.timeout: float | None = self._pool.connection_kwargs.get("socket_timeout")
        self._conn: Any = None

    async def send(self, packed: bytes) -> None:
        if self._conn is None:
            conn = await self._pool.get_connection()
            # The caller bounds a round trip as a whole: redis-py would arm a loop timer for each
            # reply read and make a task for each send (wait_for).
            conn.socket_timeout = None
            self._conn = conn
        await self._conn.send_packed_command(packed, check_health=False)

    async def read(self) -> Any:
        """The next reply, or the ``ResponseError`` Redis answered (NOSCRIPT among them) as a value:
        read whole, so the connection stays in step."""
        try:
            return await self._conn.read_response()
        except ResponseError as exc:
            return exc

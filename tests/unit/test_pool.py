"""``adapters.pool.WholeReads``: a body read that takes every buffered chunk at once reads the same
bytes, in the same reads, as aiohttp's own reader, and keeps its flow control."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiohttp.streams import StreamReader

from adapters import pool

pytestmark = pytest.mark.skipif(not pool._WHOLE, reason="this aiohttp's reader lacks what WholeReads relies on")

LIMIT = 2**16  # aiohttp's client reads with this limit (read_bufsize)


class Protocol:
    """What a reader asks of its connection: pauses and resumes, counted."""

    def __init__(self) -> None:
        self._reading_paused = False
        self.paused = self.resumed = 0

    def pause_reading(self) -> None:
        self._reading_paused = True
        self.paused += 1

    def resume_reading(self, resume_parser: bool = True) -> None:
        if self._reading_paused:
            self._reading_paused = False
            self.resumed += 1


def reader(whole: bool) -> tuple[StreamReader, Protocol]:
    protocol = Protocol()
    made = StreamReader(protocol, LIMIT, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    if whole:
        pool.drain_whole(made)
    return made, protocol


def feed(made: StreamReader, chunks: list[bytes]) -> None:
    """As aiohttp's parser feeds a chunked body: each HTTP chunk marked."""
    for chunk in chunks:
        made.begin_http_chunk_receiving()
        made.feed_data(chunk)
        made.end_http_chunk_receiving()


async def test_a_read_takes_every_buffered_chunk_in_one_join() -> None:
    made, _ = reader(whole=True)
    assert type(made) is pool.WholeReads
    events = [b'data: {"n":%d}\n\n' % i for i in range(64)]
    feed(made, events)
    assert await made.readany() == b"".join(events)
    feed(made, [b"data: [DONE]\n\n"])
    made.feed_eof()
    assert await made.readany() == b"data: [DONE]\n\n"
    assert await made.readany() == b""
    assert made.is_eof() and made.total_bytes == sum(map(len, events)) + 14


async def test_reads_match_aiohttps_own_reader_chunk_for_chunk() -> None:
    """Random bursts of random chunks, read with readany() and read(n) in turn: the same bytes in the
    same pieces from both readers, and the same bookkeeping after each read."""
    rnd = random.Random(7)
    ours, _ = reader(whole=True)
    theirs, _ = reader(whole=False)
    for _ in range(300):
        burst = [rnd.randbytes(rnd.randint(1, 300)) for _ in range(rnd.randint(1, 40))]
        feed(ours, burst)
        feed(theirs, burst)
        while theirs._size:
            n = rnd.choice((-1, -1, rnd.randint(1, 500)))
            got = await (ours.readany() if n == -1 else ours.read(n))
            assert got == await (theirs.readany() if n == -1 else theirs.read(n))
            assert (ours._size, ours._cursor) == (theirs._size, theirs._cursor)
            assert ours._http_chunk_splits == theirs._http_chunk_splits  # what pauses a connection of many chunks
    assert ours.total_bytes == theirs.total_bytes and ours._size == 0


async def test_a_paused_connection_is_resumed_once_the_buffer_is_drained() -> None:
    made, protocol = reader(whole=True)
    feed(made, [b"x" * 4096] * (2 * LIMIT // 4096 + 1))  # past the high-water mark
    assert protocol._reading_paused and protocol.paused >= 1
    data = await made.readany()
    assert len(data) == 2 * LIMIT + 4096 and made._size == 0
    assert not protocol._reading_paused and protocol.resumed == 1


async def test_only_a_plain_reader_changes_class() -> None:
    class Other(StreamReader):
        __slots__ = ()

    made = Other(Protocol(), LIMIT, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    pool.drain_whole(made)
    assert type(made) is Other

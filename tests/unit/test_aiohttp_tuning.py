"""``gateway.runtime.aiohttp_tuning``: fails when aiohttp changes under it. The private names and
signatures ``WholeReads`` relies on exist and behave as assumed, and its reads give the same bytes,
in the same reads, with the same bookkeeping and flow control as aiohttp's own reader."""

from __future__ import annotations

import asyncio
import inspect
import random

import aiohttp
import pytest
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import TestServer

from gateway.runtime import aiohttp_tuning as tuning

LIMIT = 2**16  # aiohttp's client reads with this limit (read_bufsize)


def test_the_installed_aiohttp_is_the_one_checked() -> None:
    assert aiohttp.__version__ == tuning.CHECKED_AGAINST, (
        f"aiohttp {aiohttp.__version__}: re-run this file and the A/B benchmark, then update CHECKED_AGAINST "
        "(or drop the module if the upstream change in its docstring has landed)"
    )


def test_the_reader_has_every_private_name_relied_on() -> None:
    assert tuning.SUPPORTED, tuning.USES - set(StreamReader.__slots__)
    assert list(inspect.signature(StreamReader._read_nowait).parameters) == ["self", "n"]
    assert list(inspect.signature(StreamReader._read_nowait_chunk).parameters) == ["self", "n"]
    # readany() is what the stream loop calls; it must come through _read_nowait(-1)
    assert "self._read_nowait(-1)" in inspect.getsource(StreamReader.readany)


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
        tuning.drain_whole(made)
    return made, protocol


def feed(made: StreamReader, chunks: list[bytes]) -> None:
    """As aiohttp's parser feeds a chunked body: each HTTP chunk marked."""
    for chunk in chunks:
        made.begin_http_chunk_receiving()
        made.feed_data(chunk)
        made.end_http_chunk_receiving()


async def test_a_read_takes_every_buffered_chunk_in_one_join(monkeypatch: pytest.MonkeyPatch) -> None:
    made, _ = reader(whole=True)
    assert type(made) is tuning.WholeReads
    events = [b'data: {"n":%d}\n\n' % i for i in range(64)]
    feed(made, events)

    def per_chunk(self: StreamReader, n: int) -> bytes:
        raise AssertionError("a whole read went chunk by chunk")

    with monkeypatch.context() as patched:
        patched.setattr(StreamReader, "_read_nowait_chunk", per_chunk)
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
    tuning.drain_whole(made)
    assert type(made) is Other


async def test_a_chunked_answer_is_read_through_a_plain_reader_that_can_change_class() -> None:
    """aiohttp's parser makes the body reader ``drain_whole`` changes: a plain ``StreamReader``."""

    async def events(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(8):
            await resp.write(b"data: %d\n\n" % i)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/", events)
    body = b""
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
        resp = await session.get(server.make_url("/"))
        assert type(resp.content) is StreamReader
        tuning.drain_whole(resp.content)
        assert type(resp.content) is tuning.WholeReads
        while data := await resp.content.readany():
            body += data
    assert body == b"".join(b"data: %d\n\n" % i for i in range(8))


def test_a_stream_response_still_reads_the_head_flag_it_sets() -> None:
    """``EventStream`` flips a class attribute aiohttp's own StreamResponse declares and reads when it
    writes the head; a release that renames or drops it would send the head alone again, silently."""
    import inspect

    from aiohttp import web

    assert web.StreamResponse._send_headers_immediately is True  # type: ignore[attr-defined]
    assert tuning.EventStream._send_headers_immediately is False  # type: ignore[attr-defined]
    assert "_send_headers_immediately" in inspect.getsource(web.StreamResponse)

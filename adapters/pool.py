"""Upstream connection pools: aiohttp connectors whose connections read answers through
``ChunkedReader``, aiohttp's client protocol less a no-op it makes for every HTTP chunk it hands out;
``drain_whole``, which has a streamed body's reads take every buffered chunk at once; and ``finish``,
which keeps a stream's connection once its answer is complete.

aiohttp 3.14's ``StreamReader`` calls its protocol's ``resume_reading()`` for each chunk a read takes
while the buffer is below its low-water mark, paused or not (``_read_nowait_chunk``). Unpaused, the
call feeds the parser no data and resumes a transport that is reading: nothing happens, at ~1 µs a
time. An SSE upstream writes one HTTP chunk per event, so a 64-chunk stream paid it 64 times: 12% of
the gateway's CPU per relayed stream (interleaved A/B at concurrency 64, 491 -> 431 µs per stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader


class ChunkedReader(ResponseHandler):
    """Resumes only what was paused. aiohttp pauses a connection's parser and transport only through
    ``pause_reading()``, which sets ``_reading_paused``: unset, there is nothing to resume."""

    def resume_reading(self, *args: Any, **kwargs: Any) -> None:
        if self._reading_paused:
            super().resume_reading(*args, **kwargs)


def connector(**options: Any) -> aiohttp.TCPConnector:
    """A ``TCPConnector`` (``options`` as aiohttp takes them) whose connections are ``ChunkedReader``s,
    in the running loop. The protocol factory is the connector's own attribute, not public API: an
    aiohttp without it keeps its own protocol, which reads the same, a little slower."""
    made = aiohttp.TCPConnector(**options)
    if isinstance(getattr(made, "_factory", None), functools.partial):
        made._factory = functools.partial(cast(type[ResponseHandler], ChunkedReader), loop=asyncio.get_running_loop())
    return made


class WholeReads(StreamReader):
    """``readany()`` that takes every buffered chunk in one join. aiohttp's takes them one by one
    (``_read_nowait_chunk``: slicing, counters, the chunk-split queue and a resume check per chunk),
    and an SSE upstream writes one HTTP chunk per event: a read under load holds dozens. One join, then
    the same bookkeeping once: 339 -> 326 µs of CPU per relayed 64-event burst (interleaved A/B at
    concurrency 64)."""

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


# What WholeReads uses of aiohttp's reader (private), checked once
_USES = {"_buffer", "_buffer_offset", "_timer", "_size", "_cursor", "_http_chunk_splits", "_low_water", "_protocol"}
_WHOLE = (_USES | {"_low_water_chunks"}) <= set(getattr(StreamReader, "__slots__", ()))


def drain_whole(content: StreamReader) -> None:
    """Has ``content`` (a response body) read as ``WholeReads`` does. The class changes in place: aiohttp's
    parser made the reader and feeds it, and only it can (its reader class is compiled in). An aiohttp
    whose reader lacks what ``WholeReads`` relies on, or a body that is not a plain reader (an empty
    one), reads as before."""
    if _WHOLE and type(content) is StreamReader:
        content.__class__ = WholeReads


# After a stream's last event, how long and how much more its body may take to end
FINISH_SECONDS = 1.0
FINISH_BYTES = 64 * 1024
_finishing: set[asyncio.Task[None]] = set()


def finish(resp: aiohttp.ClientResponse) -> None:
    """Returns the connection of ``resp``, a stream whose answer is complete, to its pool once its body
    has ended. A model server writes the body's end (HTTP's last chunk) after ``[DONE]``, in a write of
    its own: a connection given back before that is closed by aiohttp, unread, and the next request
    opens a new one (real vLLM: 16 connections for 20 streams in a row). The end usually follows at
    once; it is waited for in the background, the client's answer not held for it, and a body that
    does not end soon, or goes on, loses its connection."""
    if resp.connection is None:  # the body's end is in: aiohttp gave the connection back with it
        return
    task = asyncio.get_running_loop().create_task(_finish(resp))
    _finishing.add(task)
    task.add_done_callback(_finishing.discard)


async def _finish(resp: aiohttp.ClientResponse) -> None:
    try:
        with contextlib.suppress(TimeoutError, aiohttp.ClientError):
            async with asyncio.timeout(FINISH_SECONDS):
                left = FINISH_BYTES
                while left > 0 and (data := await resp.content.readany()):
                    left -= len(data)
    finally:
        resp.close()  # nothing left to close once the end came

"""``adapters.pool.Finisher``: a complete stream's body is read to its end in the background and the
response closed then (its connection back in the pool); a body that goes on, or does not end in
time, is closed without waiting longer."""

from __future__ import annotations

import asyncio

import pytest

from adapters import pool


class Body:
    """What ``finish`` reads of a response: ``readany()``, these chunks, then the end (or nothing more
    ever, if ``stalls``)."""

    def __init__(self, chunks: list[bytes], stalls: bool = False) -> None:
        self.chunks = chunks
        self.stalls = stalls

    async def readany(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.stalls:
            await asyncio.Event().wait()
        return b""


class Response:
    def __init__(self, body: Body, connection: object | None = True) -> None:
        self.content = body
        self.connection = connection
        self.closed = asyncio.Event()

    def close(self) -> None:
        self.closed.set()


async def finished(resp: Response) -> Response:
    pool.Finisher().finish(resp)  # type: ignore[arg-type]
    async with asyncio.timeout(10):  # only a guard: the close is what is waited for
        await resp.closed.wait()
    return resp


async def test_a_response_whose_body_has_ended_is_left_alone() -> None:
    resp = Response(Body([b"x"]), connection=None)
    finisher = pool.Finisher()
    finisher.finish(resp)  # type: ignore[arg-type]
    assert not finisher.tasks and not resp.closed.is_set() and resp.content.chunks == [b"x"]


async def test_closing_the_finisher_stops_what_it_still_reads() -> None:
    """An upstream's close (the app's shutdown) ends its background reads: no task outlives its app."""
    resp = Response(Body([], stalls=True))
    finisher = pool.Finisher()
    finisher.finish(resp)  # type: ignore[arg-type]
    assert finisher.tasks
    await finisher.close()
    assert not finisher.tasks and resp.closed.is_set()


async def test_the_body_end_is_read_then_the_response_closed() -> None:
    resp = await finished(Response(Body([b"0\r\n", b"\r\n"])))
    assert resp.content.chunks == []


async def test_a_body_that_goes_on_is_closed_after_finish_bytes() -> None:
    chunks = [b"x" * (pool.FINISH_BYTES // 4)] * 10
    resp = await finished(Response(Body(chunks)))
    assert len(resp.content.chunks) == 6  # four chunks read, the rest left unread


async def test_a_body_that_does_not_end_is_closed_after_finish_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "FINISH_SECONDS", 0.01)
    await finished(Response(Body([], stalls=True)))

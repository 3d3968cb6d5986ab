"""A stream's bounds in one wheel entry: the first byte (as ``Bound``), then idle between reads and the
deadline; one entry per stream, not a timer per read. On a virtual clock (``tests/support/clock``)."""

from __future__ import annotations

import asyncio
from unittest import mock

import aiohttp
import pytest

from adapters.watch import StreamIdle, StreamWatch
from gateway.runtime.timers import MIN_GRAIN, Wheel
from tests.support.clock import VirtualClock, hang


@pytest.fixture
async def w(clock: VirtualClock) -> Wheel:
    """The test's own wheel, on its loop (an upstream or a Redis channel owns one in the gateway)."""
    return Wheel(asyncio.get_running_loop())


def reader() -> aiohttp.StreamReader:
    return aiohttp.StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())


def reading(r: aiohttp.StreamReader, w: Wheel, idle: float, remaining: float | None = None) -> StreamWatch:
    watch = StreamWatch(first_byte=5, idle=idle, remaining=remaining, wheel=w)
    watch.reading(r)
    return watch


async def test_a_read_waiting_longer_than_idle_fails(w: Wheel) -> None:
    r = reader()
    watch = reading(r, w, idle=0.05)
    watch.since = watch.loop.time()
    with pytest.raises(StreamIdle):
        await asyncio.wait_for(r.readany(), 1)
    watch.cancel()


async def test_time_between_reads_is_not_idle_and_data_keeps_it_alive(w: Wheel, clock: VirtualClock) -> None:
    r = reader()
    watch = reading(r, w, idle=0.05)
    await clock.advance(0.15)  # the consumer was busy: three idle periods with no read pending
    for _ in range(4):
        watch.since = watch.loop.time()
        asyncio.get_running_loop().call_soon(r.feed_data, b"x")  # data within idle, however slow the host
        assert await asyncio.wait_for(r.readany(), 1) == b"x"
        watch.since = None
    watch.cancel()
    assert not w._slots


async def test_the_deadline_ends_the_stream_even_between_reads(w: Wheel, clock: VirtualClock) -> None:
    r = reader()
    watch = reading(r, w, idle=10, remaining=0.05)
    await clock.advance(0.1)
    watch.since = watch.loop.time()
    with pytest.raises(StreamIdle):
        await asyncio.wait_for(r.readany(), 1)
    watch.cancel()


async def test_a_head_later_than_the_first_byte_bound_is_a_timeout(w: Wheel) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    watch = StreamWatch(first_byte=0.05, idle=10, remaining=None, wheel=w)
    with pytest.raises(TimeoutError), watch:
        await hang()
    assert 0.05 <= loop.time() - began <= 0.05 + MIN_GRAIN
    assert not w._slots


async def test_a_head_slower_than_idle_but_within_the_first_byte_bound_is_waited_for(
    w: Wheel, clock: VirtualClock
) -> None:
    r = reader()
    watch = StreamWatch(first_byte=0.2, idle=0.05, remaining=None, wheel=w)
    with watch:
        await clock.advance(0.1)  # past the idle bound: the head phase is not idle-bound
    watch.reading(r)
    watch.since = watch.loop.time()
    asyncio.get_running_loop().call_later(0.02, r.feed_data, b"x")
    assert await asyncio.wait_for(r.readany(), 1) == b"x"
    watch.cancel()
    await clock.advance(0.15)  # nothing fires for a cancelled watch
    assert not w._slots


async def test_an_error_before_the_head_ends_the_watch(w: Wheel) -> None:
    with pytest.raises(KeyError), StreamWatch(first_byte=5, idle=5, remaining=None, wheel=w):
        raise KeyError("x")
    assert not w._slots


async def read_one(watch: StreamWatch, r: aiohttp.StreamReader, data: bytes, clock: VirtualClock) -> None:
    """One read of ``data`` as the stream's reader makes it (``moved`` when it is not a keep-alive),
    then 20 ms of the consumer's."""
    watch.since = watch.loop.time()
    asyncio.get_running_loop().call_soon(r.feed_data, data)
    await asyncio.wait_for(r.readany(), 1)
    watch.since = None
    watch.moved = watch.moved or not data.startswith(b":")
    await clock.advance(0.02)


async def test_reads_within_idle_do_not_keep_a_stream_past_its_body_bound(w: Wheel, clock: VirtualClock) -> None:
    """Keep-alives (a comment, a ping) within ``idle`` for ever: the body's own bound still ends it."""
    r = reader()
    watch = StreamWatch(first_byte=5, idle=10, remaining=None, wheel=w)
    watch.reading(r, body=0.05)
    with pytest.raises(StreamIdle, match="not complete in time"):
        while True:
            await read_one(watch, r, b": ping\n\n", clock)
    watch.cancel()


async def test_a_stream_that_goes_on_is_not_cut_at_its_body_bound(w: Wheel, clock: VirtualClock) -> None:
    """Reads that carry events (``moved``) past the body's bound: a long answer goes on; once only
    keep-alives come for a whole bound, it ends."""
    r = reader()
    watch = StreamWatch(first_byte=5, idle=10, remaining=None, wheel=w)
    watch.reading(r, body=0.05)
    for _ in range(10):  # 0.2 s of progress: four bounds' worth
        await read_one(watch, r, b"data: {}\n\n", clock)
    with pytest.raises(StreamIdle, match="no progress"):
        while True:
            await read_one(watch, r, b": ping\n\n", clock)
    watch.cancel()

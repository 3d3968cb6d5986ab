"""The stream idle bound: one timer per stream, not per read."""

from __future__ import annotations

import asyncio
from unittest import mock

import aiohttp
import pytest

from adapters.http import IdleWatch, StreamIdle


def reader() -> aiohttp.StreamReader:
    return aiohttp.StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())


async def test_a_read_waiting_longer_than_idle_fails() -> None:
    r = reader()
    watch = IdleWatch(r, idle=0.05, remaining=None)
    watch.since = watch.loop.time()
    with pytest.raises(StreamIdle):
        await asyncio.wait_for(r.readany(), 1)
    watch.cancel()


async def test_time_between_reads_is_not_idle_and_data_keeps_it_alive() -> None:
    r = reader()
    watch = IdleWatch(r, idle=0.05, remaining=None)
    await asyncio.sleep(0.15)  # the consumer was busy: three idle periods with no read pending
    for _ in range(4):
        watch.since = watch.loop.time()
        asyncio.get_running_loop().call_later(0.03, r.feed_data, b"x")
        assert await asyncio.wait_for(r.readany(), 1) == b"x"
        watch.since = None
    watch.cancel()


async def test_the_deadline_ends_the_stream_even_between_reads() -> None:
    r = reader()
    watch = IdleWatch(r, idle=10, remaining=0.05)
    await asyncio.sleep(0.1)
    watch.since = watch.loop.time()
    with pytest.raises(StreamIdle):
        await asyncio.wait_for(r.readany(), 1)
    watch.cancel()

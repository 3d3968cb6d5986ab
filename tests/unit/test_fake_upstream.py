"""The benchmark's fake upstream takes its stream pacing from the runner between runs: bursts for the
throughput runs, chunks a set time apart for the paced run, and back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from benchmarks.fake_upstream import HttpProtocol, Settings

BODY = {"model": "tiny", "prompt": "hi", "max_tokens": 4, "stream": True}


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    settings = Settings(4, 0.0, 0.0)
    server = await loop.create_server(lambda: HttpProtocol(settings), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


async def reads(session: aiohttp.ClientSession, url: str) -> tuple[list[bytes], float]:
    began = time.perf_counter()
    async with session.post(url + "/v1/completions", json=BODY) as resp:
        assert resp.status == 200
        parts = [chunk async for chunk in resp.content.iter_any()]
    return parts, time.perf_counter() - began


async def test_pacing_is_set_and_given_back(upstream: str) -> None:
    async with aiohttp.ClientSession() as session:
        whole, _ = await reads(session, upstream)
        assert b"".join(whole).count(b"data: ") == 5  # 4 chunks and [DONE]
        async with session.post(upstream + "/bench/pacing", json={"ttft_ms": 0, "gap_ms": 20}) as resp:
            assert resp.status == 200 and await resp.json() == {"ttft_ms": 0.0, "gap_ms": 0.0}
        paced, took = await reads(session, upstream)
        assert b"".join(paced) == b"".join(whole)  # the same answer, spread out
        assert len(paced) >= 4 and took >= 0.06  # three gaps of 20 ms
        async with session.post(upstream + "/bench/pacing", json={"ttft_ms": 0, "gap_ms": 0}) as resp:
            assert await resp.json() == {"ttft_ms": 0.0, "gap_ms": 20.0}


@pytest.mark.parametrize("body", [{"gap_ms": "x"}, {"gap_ms": -1}, {"ttft_ms": float("inf")}, [1]])
async def test_bad_pacing_is_refused(upstream: str, body: object) -> None:
    async with aiohttp.ClientSession() as session, session.post(upstream + "/bench/pacing", json=body) as resp:
        assert resp.status == 400

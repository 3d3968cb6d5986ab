"""One target over two real vLLM replicas (CPU): the load is shared, the engines' own gauges steer
requests away from a busy replica, a dead replica is skipped, and a client's hang-up aborts the
request in whichever engine had it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import aiohttp
import pytest

from backends.pool.balance import ReplicaState
from backends.pool.replicas import ReplicaPool, read_gauges
from tests.support import eventually
from tests.support.redis_servers import free_port
from tests.vllm.conftest import VLLM
from tests.vllm.engine_stats import HANG_UP_TOKENS, assert_hang_ups_abort, ran_to_end
from tests.vllm.pools import pool_gateway

pytestmark = pytest.mark.vllm
KEY = "gw-vllm-pool-key"
BEARER = {"Authorization": f"Bearer {KEY}"}


class Pool(NamedTuple):
    url: str  # the gateway's
    session: aiohttp.ClientSession
    replicas: ReplicaPool  # the gateway's view of the two engines (and a dead one)


def view(state: ReplicaState) -> str:
    age = time.monotonic() - state.scraped_at
    return (
        f"healthy={state.healthy} slow={state.slow_scrapes} running={state.running} waiting={state.waiting}"
        f" in_flight={state.in_flight} scraped={age:.1f}s ago cooling={state.cool_until > time.monotonic()}"
    )


async def gauges(session: aiohttp.ClientSession, vllm: VLLM) -> dict[str, float]:
    async with session.get(vllm.base + "/metrics") as resp:
        return read_gauges(await resp.text())


@contextlib.asynccontextmanager
async def serving(vllm_server: VLLM, vllm_second: VLLM, scrape_interval: float) -> AsyncIterator[Pool]:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    target = {
        "provider": "vllm",
        "name": "tiny-pool",
        "replicas": [vllm_server.url, vllm_second.url, dead],
        # a busy engine's /metrics can take seconds on this crowded 2-core host: a short timeout would
        # leave the pool with no gauges at all, which is not what these tests are about; and gauges stay
        # valid long enough for the choices to be made on them
        "balance": {"scrape_interval": scrape_interval, "scrape_timeout": 15.0, "stale_after": 600.0},
        # likewise a connection to the idle engine: once, in a clean-clone CI run, connecting took over
        # the default 5 s while both engines and 24 busy requests crowded this process off the cores, and
        # the pool rightly fell back to the busy replica
        "timeouts": {"connect": 30.0},
    }
    async with pool_gateway(target, KEY) as (url, replicas), aiohttp.ClientSession() as session:
        yield Pool(url, session, replicas)


@pytest.fixture
async def pool(vllm_server: VLLM, vllm_second: VLLM) -> AsyncIterator[Pool]:
    async with serving(vllm_server, vllm_second, scrape_interval=0.2) as made:
        yield made


@pytest.fixture
async def hand_scraped_pool(vllm_server: VLLM, vllm_second: VLLM) -> AsyncIterator[Pool]:
    """Scraped at start-up, then only when the test calls ``scrape()``: what the gateway knows of the
    engines when it chooses is what the test saw it learn, however the crowded host then answers."""
    async with serving(vllm_server, vllm_second, scrape_interval=3600.0) as made:
        yield made


async def stream_text(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> str:
    async with session.post(url + "/v1/completions", json={**body, "stream": True}, headers=BEARER) as resp:
        assert resp.status == 200, await resp.text()
        raw = (await resp.read()).decode()
    chunks = [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: {")]
    assert raw.rstrip().endswith("data: [DONE]")
    return "".join(c["choices"][0]["text"] for c in chunks if c["choices"])


async def test_two_replicas_share_a_burst_and_answer_alike(pool: Pool, vllm_server: VLLM, vllm_second: VLLM) -> None:
    url, session = pool.url, pool.session
    before = [await ran_to_end(v) for v in (vllm_server, vllm_second)]
    body = {"model": "tiny", "prompt": "one two three", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    texts = await asyncio.gather(*(stream_text(session, url, body) for _ in range(8)))
    after = [await ran_to_end(v) for v in (vllm_server, vllm_second)]
    served = [a - b for a, b in zip(after, before, strict=True)]
    assert sum(served) == 8 and min(served) >= 2, served  # both engines worked; the dead replica was skipped
    assert len(set(texts)) == 1 and texts[0]  # the same weights: greedy answers agree across replicas


async def test_a_busy_engine_is_avoided_by_its_scraped_gauges(
    hand_scraped_pool: Pool, vllm_server: VLLM, vllm_second: VLLM
) -> None:
    """Requests sent to one replica behind the gateway's back (another gateway, say) show only in that
    engine's /metrics; the pool must read them and send its own requests to the other replica.

    The gateway scrapes when the test says (``hand_scraped_pool``): the background scraper's own timing on
    a starved host (scrapes of both engines timing out for a minute, a busy engine whose API server takes
    the occupying posts in late and reads as drained) is the integration tests' business, with replicas
    whose answers they control. Here: vLLM's real gauges, read by the pool, steer its choices."""
    pool = hand_scraped_pool
    url, session = pool.url, pool.session
    # n=8: each request is 8 sequences in the engine, so the backlog does not depend on this process
    # posting again quickly (it also runs the gateway, and both engines' threads crowd it off the cores)
    long = {"model": vllm_server.model, "prompt": "a", "max_tokens": 480, "ignore_eos": True, "n": 8}

    async def occupy() -> None:
        while True:  # keeps the engine busy until cancelled, however slowly the test runs
            with contextlib.suppress(aiohttp.ClientError):  # a kept-alive connection may have been closed
                async with session.post(vllm_server.url + "/completions", json=long) as resp:
                    assert resp.status == 200

    background = [asyncio.create_task(occupy()) for _ in range(24)]
    try:

        async def queued() -> bool:
            return bool((await gauges(session, vllm_server)).get("waiting", 0) >= 8)

        await eventually(queued, "the occupying requests queued in the engine")
        # until one scrape by the gateway has both: the busy engine's queue, and the idle engine answering
        # (a scrape that times out counts its replica as loaded)
        (busy, idle), deadline = pool.replicas.states[:2], time.monotonic() + 90
        await pool.replicas.scrape()
        while busy.waiting < 1 or idle.slow_scrapes or not (idle.healthy and busy.healthy):
            assert time.monotonic() < deadline, f"the gateway never saw the load: {view(busy)} / {view(idle)}"
            await pool.replicas.scrape()
        before = await ran_to_end(vllm_second)
        short = {"model": "tiny", "prompt": "hello", "max_tokens": 4, "temperature": 0}
        seen = "\n".join(view(r) for r in pool.replicas.states[:2])  # the gateway's view, for a failure
        for _ in range(4):
            async with session.post(url + "/v1/completions", json=short, headers=BEARER) as resp:
                assert resp.status == 200, await resp.text()
        # The idle replica served all four (only the gateway sends it work); the busy one, which the
        # gateway's own in-flight count saw as just as idle, none.
        assert await ran_to_end(vllm_second) - before == 4, seen
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)


async def test_a_hang_up_aborts_the_request_in_its_engine(pool: Pool, vllm_server: VLLM, vllm_second: VLLM) -> None:
    body = {"model": "tiny", "prompt": "x", "max_tokens": HANG_UP_TOKENS, "ignore_eos": True}
    print(await assert_hang_ups_abort(pool.url + "/v1/completions", body, BEARER, [vllm_server, vllm_second]))

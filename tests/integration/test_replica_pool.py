"""A target with several replicas, against vLLM stand-ins on real sockets: load shared, affinity kept,
a failing or dead replica skipped before the first byte, a client's hang-up aborting upstream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from adapters.http import HTTPUpstream
from backends.pool.replicas import SILENT_SECONDS_TO_DOWN, SLOW_SCRAPES_TO_DOWN, ReplicaPool
from gateway.dialects.openai.egress import VLLM_WIRE
from gateway.runtime.config import GatewayConfig
from tests.fakes.upstream import Upstream, start
from tests.integration.conftest import Gateway, GatewayFactory, config
from tests.integration.dialect_clients import BY_NAME, KEY
from tests.support import eventually
from tests.support.redis_servers import free_port

Fakes = Callable[[int], Awaitable[list[Upstream]]]
AUTH = {"Authorization": f"Bearer {KEY}"}
OPENAI = BY_NAME["openai"]


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    started: list[Upstream] = []

    async def make(n: int) -> list[Upstream]:
        new = [await start("vllm", models=("tiny",)) for _ in range(n)]
        started.extend(new)
        return new

    yield make
    for f in started:
        await f.close()


def pool_config(urls: list[str], **balance: Any) -> GatewayConfig:
    target = {"provider": "vllm", "replicas": urls, "model": "tiny", "name": "pool", "balance": balance}
    return config([{"name": "m", "targets": [target]}])


def served(fake: Upstream) -> int:
    return sum(1 for r in fake.requests if r.path.endswith("/completions"))


async def test_concurrent_streams_are_shared_between_replicas(gateway: GatewayFactory, fakes: Fakes) -> None:
    replicas = await fakes(2)
    gw = await gateway(pool_config([f.url for f in replicas], scrape_interval=0.2))
    answers = await asyncio.gather(*(gw.send(OPENAI, "m", f"q{i} [[fault:slow=0.02]]", True) for i in range(16)))
    assert all(a.status == 200 and a.done for a in answers)
    counts = [served(f) for f in replicas]
    # In-flight counting spreads a burst evenly; random tie-breaking allows a little skew.
    assert sum(counts) == 16 and min(counts) >= 6, counts


async def test_a_dead_replica_is_skipped_and_reported(gateway: GatewayFactory, fakes: Fakes) -> None:
    (alive,) = await fakes(1)
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    gw = await gateway(pool_config([dead, alive.url], scrape_interval=0.2))
    for stream in (False, True) * 4:
        answer = await gw.send(OPENAI, "m", "hello", stream)
        assert answer.status == 200, answer.body
    assert served(alive) == 8
    async with gw.session.get(gw.url + "/metrics") as resp:
        text = await resp.text()
    port = dead.split(":")[2].split("/")[0]
    assert f'gateway_replica_up{{replica="pool@127.0.0.1:{port}",target="pool"}} 0.0' in text
    async with gw.session.get(gw.url + "/ready") as resp:
        assert resp.status == 200 and (await resp.json())["targets"]["pool"] is True


async def refusing_replica() -> Upstream:
    """Up by /health, but every generation is refused with 503 (vLLM's answer when it cannot admit)."""
    return await start("vllm", models=("tiny",), faults="[[fault:status=503]]")


async def test_a_replica_failing_before_the_first_byte_is_retried_elsewhere(
    gateway: GatewayFactory, fakes: Fakes
) -> None:
    (good,) = await fakes(1)
    async with await refusing_replica() as bad:
        gw = await gateway(pool_config([bad.url, good.url], scrape_interval=5))
        answers = [await gw.send(OPENAI, "m", f"p{i}", i % 2 == 0) for i in range(10)]
        assert all(a.status == 200 for a in answers), [a.body for a in answers]
        assert served(good) == 10


async def test_every_replica_failing_is_the_upstreams_error(gateway: GatewayFactory) -> None:
    refusing = [await refusing_replica() for _ in range(2)]
    try:
        gw = await gateway(pool_config([r.url for r in refusing], scrape_interval=5))
        answer = await gw.send(OPENAI, "m", "x", False)
        assert answer.status == 502 and "503" in answer.body["error"]["message"]
    finally:
        for r in refusing:
            await r.close()


async def post(gw: Gateway, prompt: str, headers: dict[str, str] | None = None) -> int:
    body = {"model": "m", "prompt": prompt, "max_tokens": 4}
    async with gw.session.post(gw.url + "/v1/completions", json=body, headers={**AUTH, **(headers or {})}) as resp:
        await resp.read()
        return resp.status


async def test_a_session_stays_on_one_replica(gateway: GatewayFactory, fakes: Fakes) -> None:
    replicas = await fakes(3)
    gw = await gateway(pool_config([f.url for f in replicas]))
    for i in range(12):
        assert await post(gw, f"turn {i}", {"X-Session-Id": "conversation-7"}) == 200
    assert sorted(served(f) for f in replicas) == [0, 0, 12]


async def test_prompts_sharing_a_prefix_go_where_it_is_cached(gateway: GatewayFactory, fakes: Fakes) -> None:
    replicas = await fakes(3)
    gw = await gateway(pool_config([f.url for f in replicas], prefix_block_chars=32))
    system = "You are a terse assistant who answers in one word. " * 3
    for i in range(12):
        assert await post(gw, system + f"Question {i}?") == 200
    assert sorted(served(f) for f in replicas) == [0, 0, 12]


async def test_a_client_hanging_up_aborts_the_replicas_request(gateway: GatewayFactory, fakes: Fakes) -> None:
    replicas = await fakes(2)
    gw = await gateway(pool_config([f.url for f in replicas]))
    body = {"model": "m", "prompt": "long [[fault:slow=0.2]]", "max_tokens": 50, "stream": True}
    async with aiohttp.ClientSession() as session:
        resp = await session.post(gw.url + "/v1/completions", json=body, headers=AUTH)
        assert resp.status == 200
        await resp.content.readline()  # the stream has started
        resp.close()

    def aborted() -> bool:
        return sum(f.cancelled for f in replicas) == 1 and sum(f.active for f in replicas) == 0

    await eventually(aborted, "the replica's request aborted")


async def test_a_replica_too_busy_to_answer_scrapes_is_loaded_before_it_is_down() -> None:
    """Scrapes that time out are load for the first seconds (a starved engine), and only a replica
    silent for SILENT_SECONDS_TO_DOWN and SLOW_SCRAPES_TO_DOWN scrapes is taken out of rotation."""

    stalled = await start("vllm", models=("tiny",), faults="[[fault:probes_hang]]")
    target = pool_config([stalled.url], scrape_interval=0.2).models[0].targets[0]
    pool = ReplicaPool(target, "m", VLLM_WIRE, HTTPUpstream)
    pool._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.2))
    try:
        state = pool.states[0]
        state.answered_at = time.monotonic()  # it answered just before the rush
        for _ in range(SLOW_SCRAPES_TO_DOWN + 1):
            await pool.scrape()
        assert state.healthy and state.slow_scrapes == SLOW_SCRAPES_TO_DOWN + 1
        assert state.load(time.monotonic(), 2.0) == SLOW_SCRAPES_TO_DOWN + 1
        state.answered_at -= SILENT_SECONDS_TO_DOWN  # silent for long enough now
        await pool.scrape()
        assert not state.healthy
    finally:
        await pool._http.close()
        await stalled.close()


async def test_prompt_ids_come_from_a_replica_a_scrape_marked_down_never_one_cooling_off() -> None:
    """A continuation is token for token only with the prompt's ids: a replica marked down by slow
    health scrapes (a busy engine) still tokenizes when no healthy one is left; the one that just
    broke (cooling off) never does, and with nothing else the pool says no replica tokenizes."""
    from gateway.core.errors import UpstreamFailed
    from gateway.core.request import InternalRequest, Operation
    from gateway.core.upstream import Call

    ups = [await start("vllm", models=("tiny",)) for _ in range(2)]
    target = pool_config([u.url for u in ups]).models[0].targets[0]
    pool = ReplicaPool(target, "m", VLLM_WIRE, HTTPUpstream)
    request = InternalRequest(operation=Operation.COMPLETION, model="m", prompts=("hello world",))
    try:
        broke, busy = pool.states
        broke.cool_until = time.monotonic() + 60
        busy.healthy = False
        call = Call("r1")
        assert await pool.prompt_ids(request, call) == await pool.members[1].prompt_ids(request, call)
        busy.cool_until = time.monotonic() + 60
        with pytest.raises(UpstreamFailed, match="no replica tokenizes"):
            await pool.prompt_ids(request, call)
    finally:
        await pool.close()
        for u in ups:
            await u.close()

"""Blocks of a shared queue's slots (``gateway.limits.fairq_blocks``) against a real Redis: two
gateways never pass the capacity together whatever the order of arrivals, releases and keeper ticks
(Hypothesis); a gateway near saturation gets the other's spare slots and the fair order holds; a
gateway killed with ``SIGKILL`` while it holds block slots strands none of them past the lease."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.limits.channel import ScriptChannel
from gateway.limits.fairq import QueueSettings, Slot, Ticket
from gateway.limits.fairq_policy import FairPolicy, FairQueues
from gateway.limits.fairq_script import channel, keys
from gateway.limits.fairq_shared import Listener, Shared, SharedQueue
from tests.integration.dialect_clients import BY_NAME
from tests.integration.test_fair_queue_shared import HOLD, doomed_and_survivor
from tests.support import eventually
from tests.support.gateways import Gateways
from tests.support.redis_servers import RedisServer

OPENAI = BY_NAME["openai"]


class Pair:
    """Two gateways' queues of one model on one Redis, each with its own connection and listener."""

    def __init__(self, client: Any, capacity: int, block: int) -> None:
        self.model = uuid.uuid4().hex
        self.capacity = capacity
        s = QueueSettings(capacity, 64, 60.0, share=capacity, block=block)
        self.queues = [
            SharedQueue(self.model, s, 2, Shared(client, self.model, 2, 30_000, ScriptChannel(client)), False, 1.0)
            for _ in range(2)
        ]
        self.listeners = [Listener(client, lambda q=q: {self.model: q}) for q in self.queues]

    def run_key(self) -> str:
        return keys(self.model, 2)[0]

    async def close(self) -> None:
        for listener in self.listeners:
            await listener.close()


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Any]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def started(pair: Pair) -> Pair:
    for listener in pair.listeners:
        listener.start()
    # both listening before the first call (a ``tight`` published before would not be heard): a
    # probe naming an expected id, published until both heard it
    for queue in pair.queues:
        queue.shared.expect("probe")
    await eventually(lambda: _heard(pair), "both listeners subscribed")
    for queue in pair.queues:
        queue.shared.forget("probe")
    return pair


async def _heard(pair: Pair) -> bool:
    await pair.queues[0].shared.client.publish(channel(pair.model), "probe")
    return all("probe" in q.shared.told for q in pair.queues)


def ticket(i: int | str) -> Ticket:
    return Ticket(f"r{i}-{uuid.uuid4().hex[:8]}", "t", "t", "interactive", 0)


async def test_near_saturation_a_gateway_gets_the_others_spare_and_the_order_holds(client: Any) -> None:
    """Eight slots, blocks of two: gateway A holds one request and a spare block; gateway B can still
    run seven at once (A's spare comes back when B's calls find the pool near saturation), B's eighth
    waits, and A's next request queues behind it instead of going ahead on a block."""
    pair = await started(Pair(client, 8, 2))
    a, b = pair.queues
    try:
        held_a = await a.enter(ticket("a0"), lambda: None)
        await eventually(lambda: len(a.blocks.spare) == 2, "a block leased by A")
        held_b = [await b.enter(ticket(f"b{i}"), lambda: None) for i in range(7)]  # A's spare among them
        assert not a.blocks.spare and a.blocks.tight
        eighth = asyncio.create_task(b.enter(ticket("b7"), lambda: None))
        await eventually(lambda: client.zcard(keys(pair.model, 2)[2]), "B's eighth in the shared queue")
        later = asyncio.create_task(a.enter(ticket("a1"), lambda: None))
        await eventually(lambda: _zcard_is(client, keys(pair.model, 2)[2], 2), "A's next queued behind it")
        assert await client.zcard(pair.run_key()) == 8
        held_b.pop().release()  # the slot goes to the head: B's eighth, not A's later request
        held_b.append(await eighth)
        assert not later.done()
        held_a.release()
        held_a = await later
        for slot in [held_a, *held_b]:
            slot.release()
        await eventually(lambda: _zcard_is(client, pair.run_key(), 0), "every slot back")
    finally:
        await pair.close()


async def _zcard_is(client: Any, key: str, n: int) -> bool:
    return int(await client.zcard(key)) == n


actions = st.sampled_from(["enter", "enter", "release", "tick", "settle"])
steps = st.lists(st.tuples(st.integers(0, 1), actions), max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, capacity=st.integers(2, 12), block=st.integers(1, 3))
async def test_two_gateways_with_blocks_never_pass_the_capacity(
    redis_server: RedisServer, steps: list[tuple[int, str]], capacity: int, block: int
) -> None:
    """Arrivals, releases, keeper ticks and answered calls at random on two gateways: the requests holding slots
    never number more than the capacity, nor the leases in Redis; every request is served in the end;
    once idle, the keepers give every slot back."""
    client = aioredis.Redis.from_url(redis_server.url)
    pair = await started(Pair(client, capacity, block))
    holding: list[list[Slot]] = [[], []]
    entering: list[tuple[int, asyncio.Task[Slot]]] = []

    async def check() -> None:
        for gw, task in [e for e in entering if e[1].done()]:
            entering.remove((gw, task))
            holding[gw].append(task.result())
        assert len(holding[0]) + len(holding[1]) <= capacity
        assert await client.zcard(pair.run_key()) <= capacity

    try:
        for i, (gw, step) in enumerate(steps):
            queue = pair.queues[gw]
            if step == "enter":
                entering.append((gw, asyncio.create_task(queue.enter(ticket(i), lambda: None))))
            elif step == "release" and holding[gw]:
                holding[gw].pop(0).release()
            elif step == "tick":
                await queue.renew()
            elif step == "settle":  # its leases, leaves and gives answered
                await asyncio.gather(*queue.tasks)
            await asyncio.sleep(0)  # the step's calls under way before the next (no clock)
            await check()
        while entering or holding[0] or holding[1]:
            await eventually(lambda: any(h for h in holding) or any(t.done() for _, t in entering), "a request served")
            await check()
            for slots in holding:
                while slots:
                    slots.pop().release()
        await eventually(lambda: not any(q.blocks.leasing for q in pair.queues), "no lease under way")
        for _ in range(2):  # the first tick keeps a block's worth (requests came), the second gives it
            for queue in pair.queues:
                await queue.renew()
        await eventually(lambda: _zcard_is(client, pair.run_key(), 0), "every slot back once idle")
    finally:
        for _, task in entering:
            task.cancel()
        await pair.close()
        await client.aclose()


async def test_a_killed_gateways_block_slots_come_back_within_the_lease(
    tmp_path: Path, upstream: Any, redis_server: RedisServer, gateways: Gateways
) -> None:
    """Eight slots, blocks of two (``limits.replicas: 1``): a gateway running six requests on block
    slots is killed; the other gateway's eight requests all run once the leases run out."""
    server = await upstream("openai")
    model, doomed, survivor = await doomed_and_survivor(tmp_path, server, redis_server.url, gateways, 8)
    path_, headers, body = OPENAI.request(model, HOLD, False)
    blk = f"gw:fq:{{{model}}}:blk"
    client = aioredis.Redis.from_url(redis_server.url)
    async with aiohttp.ClientSession() as session:

        async def post(url: str, prompt: str) -> int:
            async with session.post(url + path_, json={**body, "prompt": prompt}, headers=headers) as resp:
                await resp.read()
                return resp.status

        tasks: list[asyncio.Task[int]] = []
        try:
            assert await post(doomed.url, "hello") == 200  # its first request leases a block
            for n in range(1, 7):  # one at a time: each finds the block's spare
                tasks.append(asyncio.create_task(post(doomed.url, HOLD)))
                await eventually(lambda n=n: server.active == n, f"{n} held through the doomed gateway")
            assert await client.zcard(blk) >= 1  # block slots among them
            tasks += [asyncio.create_task(post(survivor.url, HOLD)) for _ in range(8)]
            await eventually(lambda: _zcard_is(client, f"gw:fq:{{{model}}}:wait:0", 6), "six queued at the survivor")
            doomed.proc.send_signal(signal.SIGKILL)
            await eventually(lambda: server.cancelled >= 6, "the killed gateway's requests hung up upstream")
            # its leases, block slots among them, run out (lease_ttl 2 s): every slot is the survivor's
            await eventually(lambda: server.active == 8, "the survivor's eight requests all running")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.aclose()


async def test_a_gateway_that_missed_tight_hears_it_at_the_next_renewal(client: Any) -> None:
    """Four slots, blocks of one: A holds a spare slot and its listener is down when B's requests
    fill the pool and one queues; once A listens again, B's next renewal says ``tight`` again and
    A's spare goes to B's waiter."""
    pair = Pair(client, 4, 1)
    a, b = pair.queues
    pair.listeners[1].start()
    try:
        held = [await a.enter(ticket("a0"), lambda: None)]
        await eventually(lambda: len(a.blocks.spare) == 1, "a block leased by A")
        held += [await b.enter(ticket(f"b{i}"), lambda: None) for i in range(2)]
        waiter = asyncio.create_task(b.enter(ticket("b2"), lambda: None))
        await eventually(lambda: client.zcard(keys(pair.model, 2)[2]), "B's third in the shared queue")
        assert a.blocks.spare and not a.blocks.tight  # the message went by while A was not listening
        a.shared.expect("probe")
        pair.listeners[0].start()
        await eventually(lambda: _heard_by(a, pair.model), "A listening again")
        await b.renew()
        held.append(await waiter)
        assert not a.blocks.spare and a.blocks.tight
        for slot in held:
            slot.release()
    finally:
        await pair.close()


async def _heard_by(queue: SharedQueue, model: str) -> bool:
    await queue.shared.client.publish(channel(model), "probe")
    return "probe" in queue.shared.told


async def test_a_reload_that_drops_a_queue_gives_its_block_back(client: Any) -> None:
    """A reload that removes a model's queue (or rebuilds it for other classes): the old queue's spare
    goes back at once and its slot in use when its request ends, not a lease later (nobody renews them)."""
    model = uuid.uuid4().hex
    policy = FairPolicy(queues={model: QueueSettings(8, 64, 60.0, share=8, block=2)})
    fair = FairQueues(policy, client)
    queue = fair.queues[model]
    first = await queue.enter(ticket("a0"), lambda: None)
    assert isinstance(queue, SharedQueue)
    await eventually(lambda: len(queue.blocks.spare) == 2, "a block leased")
    held = await queue.enter(ticket("a1"), lambda: None)
    assert held.rid.startswith(queue.blocks.prefix)
    first.release()
    await eventually(lambda: _zcard_is(client, keys(model, 2)[0], 2), "a block slot in use and one spare")
    fair.configure(FairPolicy())
    await eventually(lambda: _zcard_is(client, keys(model, 2)[0], 1), "the spare given back")
    held.release()
    await eventually(lambda: _zcard_is(client, keys(model, 2)[0], 0), "the slot in use given back as it ended")

"""A model's queue shared through a real Redis: the Lua script serves in the order of its Python twin
(Hypothesis), two gateways in front of one upstream never pass its capacity together, a killed
gateway's slots come back within the lease, and with Redis out each gateway serves its own share (or
503 under ``on_failure.concurrency: closed``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.limits.channel import ScriptChannel
from gateway.limits.fairq import (
    EVICTED,
    GRANTED,
    PRIORITY_HEADER,
    WAITING,
    LocalQueue,
    QueueFull,
    QueueSettings,
    Reserve,
    Ticket,
    Waiter,
)
from gateway.limits.fairq_script import FULL, GONE, keys
from gateway.limits.fairq_script import GRANTED as SLOT
from gateway.limits.fairq_shared import WAITER_LEASE, Listener, Shared, SharedQueue
from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BY_NAME, KEY
from tests.support import eventually
from tests.support.gateways import Gateways, Served
from tests.support.redis_servers import RedisServer

OPENAI = BY_NAME["openai"]
HOLD = "[[fault:hang_before=60]]"


def queued(server: Any, redis_url: str, capacity: int, **extra: Any) -> Any:
    queue = {"capacity": capacity, "max_waiting": 16, "timeout": 60}
    return config(
        [{"name": "m", "targets": [target(server, "openai")], "queue": queue}],
        redis={"url": redis_url, "timeout_ms": 1000, **extra.pop("redis", {})},
        **extra,
    )


# --- the script and its Python twin -------------------------------------------------------------------

steps = st.lists(
    st.one_of(st.tuples(st.sampled_from("abc"), st.integers(0, 1)), st.just(("serve", 0))), min_size=1, max_size=40
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=steps,
    weights=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
    bound=st.integers(1, 6),
    capacity=st.integers(1, 3),
)
@example(  # two slots: the idle team's second request goes before the backlog's head (ties at the last start)
    steps=[("a", 0)] * 4 + [("serve", 0)] * 2 + [("b", 0)] * 2 + [("serve", 0)] * 3,
    weights=(1, 1, 1),
    bound=6,
    capacity=2,
)
async def test_the_script_serves_and_sheds_as_its_python_twin(
    redis_server: RedisServer, steps: list[tuple[str, int]], weights: tuple[int, int, int], bound: int, capacity: int
) -> None:
    """Arrivals and services replayed on the script and on the in-process queue, a few slots (the
    virtual time is the lowest start of the last ``capacity`` served), a small bound: the same
    refusals, the same evictions, the same order of service."""
    weight = dict(zip("abc", weights, strict=True))
    client = aioredis.Redis.from_url(redis_server.url)
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000)
    twin = LocalQueue(capacity, bound, 2)
    waiters: list[Waiter] = []
    holding: list[str] = []  # the slots' holders, oldest first: a serve ends the oldest
    try:
        for i, (team, rank) in enumerate([("fill", 0)] * capacity + steps):
            if team in ("serve", "fill"):
                if team == "serve":
                    await shared.leave(holding.pop(0), 0, capacity, bound)
                    twin.release()
                ran = [m.decode() for m in await client.zrange(shared.keys[0], 0, -1) if m.decode() not in holding]
                served = [w for w in waiters if w.state == GRANTED]
                assert ran == [w.ticket.rid for w in served]  # the same next request, or none
                for w in served:
                    w.state = "served"
                if not ran:
                    assert twin.take()
                    assert await shared.call("enter", capacity, bound, f"holder{i}", 0, "x", "1.0") == [SLOT]
                    ran = [f"holder{i}"]
                holding += ran
                continue
            # random ids, as the gateway's: equal tags go by arrival in both, never by id
            ticket = Ticket(uuid.uuid4().hex, team, team, "", rank, float(weight[team]))
            answer = await shared.enter(ticket, capacity, bound)
            try:
                waiters.append(twin.join(ticket))
            except QueueFull:
                assert answer == [FULL]
                continue
            assert answer[0] == 0
            evicted = {w.ticket.rid for w in waiters if w.state == EVICTED}
            in_redis = {m.decode() for r in (2, 3) for m in await client.zrange(shared.keys[r], 0, -1)}
            assert in_redis == {w.ticket.rid for w in waiters if w.state == WAITING}, evicted
    finally:
        await client.aclose()


reserve_steps = st.lists(
    st.one_of(st.tuples(st.sampled_from("abc"), st.integers(0, 1)), st.just(("serve", 0))), min_size=1, max_size=40
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=reserve_steps, capacity=st.integers(1, 4), slots=st.integers(1, 3))
async def test_the_scripts_reserve_keeps_the_slots_its_python_twin_keeps(
    redis_server: RedisServer, steps: list[tuple[str, int]], capacity: int, slots: int
) -> None:
    """Arrivals and services replayed on the script and on the in-process queue with a reserve (a
    window longer than the test: every team that came is active): the same arrivals served at once,
    the same waiters promoted at each release, the same slots kept free."""
    client = aioredis.Redis.from_url(redis_server.url)
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000)
    shared.reserve = (slots, 3_600_000)
    twin = LocalQueue(capacity, 1000, 2, Reserve(2, slots, 3600.0))
    waiters: list[Waiter] = []
    holding: list[tuple[str, int]] = []  # the slots' holders, oldest first: a serve ends the oldest
    try:
        for team, rank in steps:
            if team == "serve":
                if holding:
                    rid, held = holding.pop(0)
                    await shared.leave(rid, held, capacity, 1000)
                    twin.release()
            else:
                ticket = Ticket(uuid.uuid4().hex, team, team, "", rank)
                answer = await shared.enter(ticket, capacity, 1000)
                at_once = twin.take(ticket)
                if not at_once:
                    waiters.append(twin.join(ticket))
                else:
                    holding.append((ticket.rid, rank))
                assert (answer[0] == SLOT) == (at_once or waiters[-1].state == GRANTED)
            for w in waiters:
                if w.state == GRANTED:
                    w.state = "served"
                    holding.append((w.ticket.rid, w.ticket.rank))
            running = {m.decode() for m in await client.zrange(shared.keys[0], 0, -1)}
            assert running == {rid for rid, _ in holding}
            assert twin.running == len(holding)
    finally:
        await client.aclose()


async def test_the_scripts_reserve_lets_go_once_the_window_passes(redis_server: RedisServer) -> None:
    """Reserve 1, a 100 ms window: a batch waiter kept from the last free slot while the interactive
    class was active takes it at its next check after the window."""
    client = aioredis.Redis.from_url(redis_server.url)
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000)
    shared.reserve = (1, 100)
    try:
        assert await shared.enter(Ticket("i1", "chat", "chat", "", 0), 2, 8) == [SLOT]
        assert await shared.leave("i1", 0, 2, 8) == 1
        assert await shared.enter(Ticket("b1", "etl", "etl", "", 1), 2, 8) == [SLOT]
        b2 = Ticket("b2", "etl", "etl", "", 1)
        assert await shared.enter(b2, 2, 8) == [0, 1]  # the last free slot, kept
        await eventually(lambda: _granted(shared.enter(b2, 2, 8, "check")), "the window passed: b2 served")
    finally:
        await client.aclose()


async def _granted(answer: Any) -> bool:
    return (await answer) == [SLOT]


async def test_packed_calls_answer_as_redis_pys_and_load_the_script_after_a_flush(
    redis_server: RedisServer,
) -> None:
    """The gateway sends the script's calls packed on a ``ScriptChannel``: every operation answers as
    the same call through redis-py does, and a Redis that lost its scripts (restarted, flushed) has
    the script loaded again by the call that found it missing."""
    client = aioredis.Redis.from_url(redis_server.url)
    plain = Shared(client, uuid.uuid4().hex, 2, 30_000)
    packed = Shared(client, uuid.uuid4().hex, 2, 30_000, ScriptChannel(client))

    async def both(op: str, *args: str | int) -> list[int]:
        answers = [await s.call(op, 1, 2, *args) for s in (plain, packed)]
        assert answers[0] == answers[1], op
        return answers[1]

    try:
        assert await both("enter", "holder", 0, "x", "1.0") == [SLOT]
        assert await both("enter", "a", 0, "a", "1.0") == [0, 1]
        assert await both("enter", "b", 1, "b", "2.0") == [0, 2]
        assert await both("enter", "c", 1, "c", "1.0") == [FULL]
        assert await both("renew", "holder", "gone") == [1]
        assert await both("leave", "holder", 0) == [1]  # the slot goes to a, the head
        assert await both("check", "a", 0, "a", "1.0") == [SLOT]
        await client.script_flush()
        assert await packed.call("leave", 1, 2, "a", 0) == [1]
        assert await packed.call("check", 1, 2, "b", 1, "b", "2.0") == [SLOT]
    finally:
        await client.aclose()


async def test_a_full_queue_makes_room_for_a_quiet_team_from_the_team_over_its_share(
    redis_server: RedisServer,
) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000)
    try:
        assert (await shared.call("enter", 1, 4, "holder", 0, "x", "1.0")) == [1]
        for i in range(4):
            assert (await shared.enter(Ticket(f"noisy{i}", "noisy", "noisy", "", 0), 1, 4))[0] == 0
        assert await shared.enter(Ticket("noisy4", "noisy", "noisy", "", 0), 1, 4) == [FULL]  # its own: refused
        for i in range(2):  # the quiet team's are never refused: the noisy team's last in line goes
            assert (await shared.enter(Ticket(f"quiet{i}", "quiet", "quiet", "", 0), 1, 4))[0] == 0
        line = [m.decode() for m in await client.zrange(shared.keys[2], 0, -1)]
        assert line == ["noisy0", "quiet0", "noisy1", "quiet1"]
    finally:
        await client.aclose()


# --- gateways in front of one upstream ----------------------------------------------------------------


async def test_two_gateways_share_one_capacity_and_one_queue(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    server = await upstream("openai")
    cfg = queued(server, redis_server.url, capacity=2, limits={"replicas": 2})
    async with contextlib.aclosing(aioredis.Redis.from_url(redis_server.url)) as admin:
        await admin.flushdb()  # this module's own Redis: a queue left by an earlier test goes
    one, two = await gateway(cfg), await gateway(cfg)
    holders = [asyncio.create_task(gw.send(OPENAI, "m", HOLD, False)) for gw in (one, two)]
    await eventually(lambda: server.active == 2, "both slots held at the upstream")
    queued_one = asyncio.create_task(one.send(OPENAI, "m", "after", False))
    queued_two = asyncio.create_task(two.send(OPENAI, "m", "after", False))
    fair_two = two.server.app[GATEWAY].fair.queues["m"]
    fair_one = one.server.app[GATEWAY].fair.queues["m"]
    await eventually(
        lambda: fair_one.gauges.waiting and fair_two.gauges.waiting and
        sum(t.n for q in (fair_one, fair_two) for t in q.gauges.waiting.values()) == 2,
        "a request waiting in each gateway",
    )  # fmt: skip
    assert server.active == 2  # neither gateway passed the shared capacity
    holders[0].cancel()  # a slot frees in gateway one: the head of the shared queue gets it
    await eventually(lambda: queued_one.done() or queued_two.done(), "a waiter served")
    holders[1].cancel()
    assert (await queued_one).status == 200 and (await queued_two).status == 200


async def test_two_gateways_keep_the_reserve_for_the_higher_class(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    """Two slots, reserve 1, through two gateways: after an interactive request, batch requests get
    one slot and wait for the other; the next interactive request, through the other gateway, takes
    it at once while batch still waits."""
    server = await upstream("openai")
    queue = {"capacity": 2, "max_waiting": 16, "timeout": 60, "reserve": 1, "reserve_window": 60}
    cfg = config(
        [{"name": "m", "targets": [target(server, "openai")], "queue": queue}],
        redis={"url": redis_server.url, "timeout_ms": 1000},
        limits={"replicas": 2},
    )
    admin = aioredis.Redis.from_url(redis_server.url)
    await admin.flushdb()
    one, two = await gateway(cfg), await gateway(cfg)

    async def post(gw: Any, prompt: str, cls: str) -> int:
        path, headers, body = OPENAI.request("m", prompt, False)
        async with gw.session.post(gw.url + path, json=body, headers={**headers, PRIORITY_HEADER: cls}) as resp:
            await resp.read()
            return resp.status

    try:
        assert await post(one, "hello", "interactive") == 200
        batch = [asyncio.create_task(post(two, HOLD, "batch")) for _ in range(2)]
        await eventually(
            lambda: _both(server.active == 1, admin.zcard(keys("m", 2)[3])), "one batch request held, one kept waiting"
        )
        assert await post(one, "hello", "interactive") == 200  # the slot kept free: no wait behind batch
        assert server.active == 1 and await admin.zcard(keys("m", 2)[3]) == 1
        for task in batch:
            task.cancel()
        await asyncio.gather(*batch, return_exceptions=True)
    finally:
        await admin.aclose()


async def _both(first: bool, count: Any) -> bool:
    return await count == 1 and first


async def test_with_redis_out_each_gateway_serves_its_share(gateway: GatewayFactory, upstream: Any) -> None:
    dead = RedisServer().start()
    dead.close()
    server = await upstream("openai")
    gw = await gateway(queued(server, dead.url, capacity=4, limits={"replicas": 2}))
    holders = [asyncio.create_task(gw.send(OPENAI, "m", HOLD, False)) for _ in range(3)]
    fair = gw.server.app[GATEWAY].fair.queues["m"]
    await eventually(lambda: server.active == 2 and fair.local.waiting == 1, "its share (4 / 2) held, one waiting")
    for task in holders:
        task.cancel()
    await eventually(lambda: fair.local.running == 0, "every local slot given back")


async def test_with_redis_out_and_closed_policy_the_answer_is_503(gateway: GatewayFactory, upstream: Any) -> None:
    dead = RedisServer().start()
    dead.close()
    server = await upstream("openai")
    cfg = queued(server, dead.url, capacity=4, redis={"on_failure": {"concurrency": "closed"}})
    answer = await (await gateway(cfg)).send(OPENAI, "m", "x", False)
    assert answer.status == 503 and b"shared queue is unavailable" in answer.raw
    assert server.active == 0


# --- a gateway killed while it holds slots ------------------------------------------------------------


async def doomed_and_survivor(
    tmp_path: Path, server: Any, redis_url: str, gateways: Gateways, capacity: int
) -> tuple[str, Served, Served]:
    """Two gateway processes in front of ``server`` sharing a fresh model's queue, leases of 2 s."""
    model = f"m{uuid.uuid4().hex[:8]}"
    queue = {"capacity": capacity, "timeout": 60}
    data = {
        "models": [{"name": model, "targets": [target(server, "openai")], "queue": queue}],
        "teams": [{"id": "team1", "keys": [{"id": "k1", "env": "FQ_KEY"}]}],
        "redis": {"url": redis_url, "timeout_ms": 1000},
        "limits": {"lease_ttl": 2},
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {"FQ_KEY": KEY, "TEST_UPSTREAM_KEY": "upstream-key"}
    doomed = await gateways.start("--config", str(path), env=env)
    return model, doomed, await gateways.start("--config", str(path), env=env)


async def test_a_killed_gateways_slots_come_back_within_the_lease(
    tmp_path: Path, upstream: Any, redis_server: RedisServer, gateways: Gateways
) -> None:
    server = await upstream("openai")
    model, doomed, survivor = await doomed_and_survivor(tmp_path, server, redis_server.url, gateways, 2)
    path_, headers, body = OPENAI.request(model, HOLD, False)
    async with aiohttp.ClientSession() as session:

        async def post(url: str, prompt: str) -> int:
            async with session.post(url + path_, json={**body, "prompt": prompt}, headers=headers) as resp:
                await resp.read()
                return resp.status

        holders = [asyncio.create_task(post(doomed.url, HOLD)) for _ in range(2)]
        await eventually(lambda: server.active == 2, "both slots held through the doomed gateway")
        waiting = asyncio.create_task(post(survivor.url, "after"))
        client = aioredis.Redis.from_url(redis_server.url)
        try:
            await eventually(
                lambda: client.zcard(f"gw:fq:{{{model}}}:wait:0"), "the survivor's request in the shared queue"
            )
            doomed.proc.send_signal(signal.SIGKILL)
            # the dead gateway's leases run out (lease_ttl 2 s) and the survivor's waiter takes a slot
            assert await asyncio.wait_for(waiting, 30) == 200
        finally:
            await client.aclose()
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)


# --- the script's shedding, leaving and wake-up --------------------------------------------------------


async def test_a_full_shared_queue_evicts_the_lowest_class_and_tells_its_waiter(redis_server: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    model = uuid.uuid4().hex
    shared = Shared(client, model, 2, 30_000)
    fair = {model: SharedQueue(model, QueueSettings(1, 2), 2, shared, closed=False, retry_seconds=1.0)}
    listener = Listener(client, lambda: fair)
    listener.start()
    try:
        assert await shared.call("enter", 1, 2, "holder", 0, "x", "1.0") == [1]
        batch = Ticket("batch", "b", "b", "batch", 1)
        assert (await shared.enter(batch, 1, 2))[0] == 0
        assert (await shared.enter(Ticket("i1", "a", "a", "interactive", 0), 1, 2)) == [0, 1]
        told = asyncio.create_task(shared.park("batch", 60))  # a message, not the 60 s fallback, ends it
        await eventually(lambda: "batch" in shared.parked, "the batch waiter parked")
        assert (await shared.enter(Ticket("i2", "a", "a", "interactive", 0), 1, 2)) == [0, 2]  # full: batch out
        assert await told == GONE
        assert await shared.enter(batch, 1, 2, "check") == [GONE]
        assert (await shared.enter(Ticket("b2", "b", "b", "batch", 1), 1, 2)) == [FULL]  # nobody lower to evict
        granted = asyncio.create_task(shared.park("i1", 60))
        await eventually(lambda: "i1" in shared.parked, "the interactive waiter parked")
        assert await shared.leave("holder", 0, 1, 2) == 1
        assert await granted == SLOT  # the grant heard on the channel
        assert await shared.leave("i2", 0, 1, 2) == 0  # a waiter that leaves holds no slot
        assert await client.zcard(shared.keys[2]) == 0
        assert await shared.leave("i1", 0, 1, 2) == 1
        assert await client.zcard(shared.keys[0]) == 0
    finally:
        await listener.close()
        await client.aclose()


async def test_a_client_gone_while_queued_leaves_the_shared_queue(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    server = await upstream("openai")
    model_keys = keys("m", 2)
    admin = aioredis.Redis.from_url(redis_server.url)
    await admin.delete(*model_keys)
    gw = await gateway(queued(server, redis_server.url, capacity=1))
    try:
        holder = asyncio.create_task(gw.send(OPENAI, "m", HOLD, False))
        await eventually(lambda: server.active == 1, "the slot held")
        gone = asyncio.create_task(gw.send(OPENAI, "m", "gone", False))
        await eventually(lambda: admin.zcard(model_keys[2]), "the request in the shared queue")
        gone.cancel()
        await eventually(lambda: _zero(admin.zcard(model_keys[2])), "the gone client's request out of the queue")
        holder.cancel()
        await eventually(lambda: _zero(admin.zcard(model_keys[0])), "the slot given back")
    finally:
        await admin.aclose()


async def _zero(count: Any) -> bool:
    return await count == 0


async def test_a_client_gone_during_the_enter_call_leaves_nothing_behind(redis_server: RedisServer) -> None:
    """Cancelled while its script call is under way (the call may have taken a slot): the slot goes
    back at once, not when its lease runs out."""
    client = aioredis.Redis.from_url(redis_server.url)
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000)
    queue = SharedQueue("m", QueueSettings(1, 4), 2, shared, closed=False, retry_seconds=1.0)
    called = asyncio.Event()
    real = shared.call

    async def call_then_hang(*args: Any) -> list[int]:
        answer = await real(*args)  # the slot is taken in Redis ...
        called.set()
        await asyncio.Event().wait()  # ... and the answer never reaches the request
        return answer

    shared.call = call_then_hang  # type: ignore[method-assign]
    try:
        entering = asyncio.create_task(queue.enter(Ticket("gone", "a", "a", "interactive", 0), lambda: None))
        await called.wait()
        assert await client.zcard(shared.keys[0]) == 1
        shared.call = real  # type: ignore[method-assign]
        entering.cancel()
        await eventually(lambda: _zero(client.zcard(shared.keys[0])), "the slot given back")
    finally:
        await client.aclose()


@pytest.mark.parametrize("free", [True, False], ids=["slot-taken", "place-taken"])
async def test_an_enter_call_past_its_timeout_leaves_nothing_in_redis(redis_server: RedisServer, free: bool) -> None:
    """The script ran (a slot, or a place in line, taken) but its answer came too late: the request
    falls back to this gateway's share and what the call took in Redis goes back at once, not when a
    lease runs out (a ghost slot nobody uses)."""
    client = aioredis.Redis.from_url(redis_server.url)
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000)
    queue = SharedQueue("m", QueueSettings(1, 4, share=1), 2, shared, closed=False, retry_seconds=60.0)
    real = shared.call

    async def late(*args: Any) -> list[int]:
        got = await real(*args)
        if args[0] == "enter":
            raise TimeoutError  # redis.timeout_ms passed after Redis ran it
        return got

    try:
        if not free:
            assert (await real("enter", 1, 4, "holder", 0, "x", "1.0")) == [SLOT]
        shared.call = late  # type: ignore[method-assign]
        slot = await queue.enter(Ticket("late", "a", "a", "interactive", 0), lambda: None)
        assert slot.rid == ""  # this gateway's share served it
        waits = shared.keys[2:4]
        await eventually(lambda: _members(client, [shared.keys[0], shared.keys[1], *waits]), "nothing of it left")
        slot.release()
    finally:
        await client.aclose()


async def _members(client: Any, zsets: list[str]) -> bool:
    found = [m.decode() for key in zsets for m in await client.zrange(key, 0, -1)]
    return "late" not in found


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(backlog=st.integers(2, 12), weight=st.integers(1, 4), quiet_weight=st.integers(1, 4), serves=st.integers(1, 6))
async def test_a_newcomer_from_an_idle_team_is_served_next_by_the_script(
    redis_server: RedisServer, backlog: int, weight: int, quiet_weight: int, serves: int
) -> None:
    """A noisy team backlogged and being served, then a quiet team's first request: the next slot is
    the quiet one's, whatever the ids (scenario a's one slot's turnover)."""
    client = aioredis.Redis.from_url(redis_server.url)
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000)
    try:
        holding = uuid.uuid4().hex
        assert (await shared.call("enter", 1, 64, holding, 0, "x", "1.0")) == [SLOT]
        for _ in range(backlog):
            assert (await shared.enter(Ticket(uuid.uuid4().hex, "noisy", "noisy", "", 0, float(weight)), 1, 64))[0] == 0
        for _ in range(min(serves, backlog - 1)):
            await shared.leave(holding, 0, 1, 64)
            holding = (await client.zrange(shared.keys[0], 0, 0))[0].decode()
        quiet = Ticket(uuid.uuid4().hex, "quiet", "quiet", "", 0, float(quiet_weight))
        assert (await shared.enter(quiet, 1, 64))[0] == 0
        await shared.leave(holding, 0, 1, 64)
        assert [m.decode() for m in await client.zrange(shared.keys[0], 0, -1)] == [quiet.rid]
    finally:
        await client.aclose()


async def test_a_waiters_place_is_leased_for_a_few_polls_not_the_slots_lease(redis_server: RedisServer) -> None:
    """A waiter's place runs out ``WAITER_LEASE`` after its gateway last checked (every poll renews
    it), so a killed gateway's waiters leave the order within seconds; a slot keeps ``lease_ttl``."""
    client = aioredis.Redis.from_url(redis_server.url)
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000)
    run, alive = shared.keys[:2]
    try:
        assert await shared.call("enter", 1, 8, "holder", 0, "x", "1.0") == [SLOT]
        assert (await shared.enter(Ticket("w", "a", "a", "", 0), 1, 8))[0] == 0
        seconds, micros = await client.time()
        now_ms = seconds * 1000 + micros // 1000
        assert now_ms < await client.zscore(alive, "w") <= now_ms + WAITER_LEASE * 1000
        assert await client.zscore(run, "holder") > now_ms + WAITER_LEASE * 1000
    finally:
        await client.aclose()

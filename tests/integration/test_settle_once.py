"""A settlement is charged exactly once, whatever happens to its script call's answer: a call that
went out and was not answered (Redis stalled past the client's timeout) is sent again as it was,
under its id, and SETTLE applies an id once (``scripts.SETTLE``). Each case against a real Redis of
its own, stalled with SIGSTOP (the call runs once it resumes), paused (the call is dropped unrun),
killed and restarted (with and without what it had run), or on Redis Cluster; the team's usage,
spend and budget in Redis then equal one charge, ``usage_unknown`` counts nothing, and
``gateway_limits_settlements_resent_total`` says what each call sent again found."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.limits import scripts
from gateway.limits.budget_rules import rules
from gateway.limits.failover import FailoverLimiter
from gateway.limits.limiter import Settlement
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import LimitValues, Plan, new_lease, planned, tag
from gateway.limits.plan import layout as plan_layout
from gateway.limits.store import RedisLimiter
from gateway.obs import metrics
from gateway.runtime.config import RedisConfig
from gateway.runtime.spend_config import Budget
from gateway.store.redis_client import close_redis, redis_client
from tests.support import eventually
from tests.support.redis_servers import RedisCluster, RedisServer

TTL_MS = 60_000  # leases and reservations outlive every test: what changes them is a settlement
# One request's charge, as ``Admission.release`` settles it: 3 prompt and 7 completion tokens under a
# token budget whose worst case was reserved at admission, priced 25 millionths.
ONE = {"requests": 1, "completion_tokens": 7, "spend": 25, "budget": 10, "leases": 0, "reserved": 0}
HELD = {"budget": 93, "leases": 1, "reserved": 1}  # what its admission holds, before its settlement


def plan_of(team: str) -> Plan:
    """A request of ``team`` under a concurrency limit and a daily token budget (worst case 93)."""
    budget = tuple(rules(Budget(tokens=1000, period="day"), ZoneInfo("Europe/Paris"), "EUR"))
    limits = plan_layout(team, "k1", LimitValues(concurrency=4), LimitValues(), budget)
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("x",), sampling=Sampling(max_tokens=90))
    return planned(team, "k1", limits, request, new_lease())


def finished(plan: Plan) -> Settlement:
    return Settlement(plan, 10 - plan.estimate, 3, 7, 1, 25 - plan.cost_estimate, 10 - plan.estimate, 25, "m", "t")


@contextlib.asynccontextmanager
async def limiter_on(url: str, cluster: bool = False, timeout_ms: int = 100) -> AsyncIterator[FailoverLimiter]:
    client = redis_client(RedisConfig(url=url, cluster=cluster, timeout_ms=timeout_ms))
    limiter = FailoverLimiter(RedisLimiter(client), LocalLimiter(), {}, retry_seconds=0.05)
    try:
        yield limiter
    finally:
        await limiter.close()
        await close_redis(client)


async def admitted(limiter: FailoverLimiter, peek: Any) -> Plan:
    """A fresh team's request, admitted in Redis; SETTLE loaded, so a call stalled in Redis runs."""
    plan = plan_of(f"t-{uuid.uuid4().hex[:8]}")
    assert await limiter.admit(plan, TTL_MS) is None
    await peek.script_load(scripts.SETTLE)
    return plan


async def charged(client: Any, plan: Plan) -> dict[str, int]:
    """What Redis holds of ``plan``'s team: its usage, its budget's spend, its leases and reservations."""
    usage = {k.decode(): int(v) for k, v in (await client.hgetall(plan.usage_key)).items()}
    budget = plan.checks[1]
    window = plan.windows[1]
    assert window is not None
    return {
        "requests": usage.get("requests", 0),
        "completion_tokens": usage.get("completion_tokens", 0),
        "spend": usage.get("spend", 0),
        "budget": int(await client.hget(budget.key, window.add) or 0),
        "leases": int(await client.zcard(plan.checks[0].key)),
        "reserved": int(await client.zcard(f"{budget.key}:held")),
    }


async def unanswered(limiter: FailoverLimiter, plan: Plan) -> None:
    """Settles ``plan`` into a Redis that does not answer: its call is kept whole, its usage known."""
    unknown = metrics.USAGE_UNKNOWN.n
    await limiter.settle([finished(plan)])
    assert limiter.outage.since is not None  # the breaker opened
    assert len(limiter.backlog.calls) == 1 and metrics.USAGE_UNKNOWN.n == unknown


def resent() -> dict[str, float]:
    """``gateway_limits_settlements_resent_total`` by result, as a scrape reads it."""
    metrics.flush()
    name = "gateway_limits_settlements_resent_total"
    return {r: REGISTRY.get_sample_value(name, {"result": r}) or 0.0 for r in ("applied", "duplicate")}


def since(before: dict[str, float]) -> dict[str, float]:
    return {r: n - before[r] for r, n in resent().items()}


APPLIED = {"applied": 1, "duplicate": 0}  # sent again, the call charged the settlement: the first never ran
DUPLICATE = {"applied": 0, "duplicate": 1}  # sent again, the call found its record: the first had run
NONE = {"applied": 0, "duplicate": 0}


async def ran(client: Any, plan: Plan) -> bool:
    return (await charged(client, plan))["requests"] > 0


async def paused(peek: Any, limiter: FailoverLimiter, plan: Plan) -> None:
    """Settles ``plan`` while Redis holds scripts (CLIENT PAUSE WRITE): the call waits there, and is
    dropped with its connection once the gateway's timeout has closed it; then Redis runs scripts again."""
    before = len(await peek.client_list())
    await peek.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
    try:
        await unanswered(limiter, plan)

        async def dropped() -> bool:  # nothing connects meanwhile
            return len(await peek.client_list()) < before

        await eventually(dropped, "the gateway's connection closed, its call with it")
    finally:
        await peek.execute_command("CLIENT", "UNPAUSE")


async def sent_again(limiter: FailoverLimiter) -> None:
    """The settler's rounds whenever the breaker lets Redis be tried, until the kept call is answered
    (a cluster may take a moment to serve a resumed node's slots again)."""

    async def taken() -> bool:
        if limiter.up:
            await limiter.settle([])
        return limiter.held() == 0

    await eventually(taken, "the kept call sent again and answered")


async def restarted(server: RedisServer, peek: Any) -> None:
    server.stop()
    server.start()
    await peek.connection_pool.disconnect()  # its connection died with the server


def stalled(server: RedisServer) -> int:
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)  # alive, connections open, answering nothing
    return server.proc.pid


async def test_a_settlement_that_ran_unanswered_is_sent_again_and_charged_once(
    own_redis: RedisServer, peek: Any
) -> None:
    async with limiter_on(own_redis.url) as limiter:
        plan = await admitted(limiter, peek)
        before = resent()  # flushes the tallies: read after it
        unknown = metrics.USAGE_UNKNOWN.n
        pid = stalled(own_redis)
        try:
            await unanswered(limiter, plan)
        finally:
            os.kill(pid, signal.SIGCONT)  # the call, read now, runs: its answer's reader is gone
        await eventually(lambda: ran(peek, plan), "the stalled call run")
        assert await charged(peek, plan) == ONE
        await sent_again(limiter)
        assert await charged(peek, plan) == ONE
        assert len(await peek.keys(f"{tag(plan.team)}:settled:*")) == 1  # the same id, sent twice
        assert metrics.USAGE_UNKNOWN.n == unknown and since(before) == DUPLICATE


async def test_a_settlement_that_never_ran_is_charged_once_when_sent_again(own_redis: RedisServer, peek: Any) -> None:
    async with limiter_on(own_redis.url) as limiter:
        plan = await admitted(limiter, peek)
        before = resent()
        await paused(peek, limiter, plan)
        assert await charged(peek, plan) == ONE | {"requests": 0, "completion_tokens": 0, "spend": 0} | HELD
        await sent_again(limiter)
        assert await charged(peek, plan) == ONE and since(before) == APPLIED


async def test_a_settlement_lost_with_a_restart_is_charged_once_when_sent_again(
    own_redis: RedisServer, peek: Any
) -> None:
    """Redis killed with the call unread and started again empty: the call (its script loaded again)
    charges once what Redis now holds, the worst case gone with the rest."""
    async with limiter_on(own_redis.url) as limiter:
        plan = await admitted(limiter, peek)
        before = resent()
        stalled(own_redis)
        await unanswered(limiter, plan)
        await restarted(own_redis, peek)  # SIGKILL ends a stopped process too
        await sent_again(limiter)
        assert await charged(peek, plan) == ONE and since(before) == APPLIED


async def test_a_settlement_kept_through_a_restart_is_not_charged_again(own_redis: RedisServer, peek: Any) -> None:
    """The call ran, Redis saved and was restarted from its snapshot: the id's record came back with
    the charge, so the call sent again changes nothing."""
    async with limiter_on(own_redis.url) as limiter:
        plan = await admitted(limiter, peek)
        pid = stalled(own_redis)
        try:
            await unanswered(limiter, plan)
        finally:
            os.kill(pid, signal.SIGCONT)
        await eventually(lambda: ran(peek, plan), "the stalled call run")
        await peek.save()
        await restarted(own_redis, peek)  # loading the snapshot from its directory
        assert await charged(peek, plan) == ONE
        before = resent()
        await sent_again(limiter)
        assert await charged(peek, plan) == ONE and since(before) == DUPLICATE


async def test_a_call_unanswered_past_the_hold_is_given_up_as_unknown(own_redis: RedisServer, peek: Any) -> None:
    """Past ``ONCE_HOLD_SECONDS`` whether a call ran cannot be known (its id's record may be gone):
    its usage is counted as unknown and only its lease release goes (the reservation expires)."""
    async with limiter_on(own_redis.url) as limiter:
        plan = await admitted(limiter, peek)
        await paused(peek, limiter, plan)
        before = resent()  # flushes the tallies: read after it
        unknown = metrics.USAGE_UNKNOWN.n
        for call in limiter.backlog.calls:  # as if held that long
            call.sent -= scripts.ONCE_HOLD_SECONDS
        await sent_again(limiter)
        assert metrics.USAGE_UNKNOWN.n == unknown + 1 and since(before) == NONE  # only its lease went
        assert await charged(peek, plan) == ONE | {"requests": 0, "completion_tokens": 0, "spend": 0} | HELD | {
            "leases": 0
        }


async def test_a_settlement_that_could_not_go_out_is_summed_again_not_kept_whole(
    own_redis: RedisServer, peek: Any
) -> None:
    """No connection (Redis down): nothing ran, so the settlement waits to be summed with the next."""
    async with limiter_on(own_redis.url) as limiter:
        plan = await admitted(limiter, peek)
        # the channel's connection too: a call written to a dead one may have run (as far as it knows)
        await limiter.redis.client.connection_pool.disconnect()
        own_redis.stop()
        await limiter.settle([finished(plan)])
        assert limiter.outage.since is not None and limiter.backlog.calls == [] and len(limiter.backlog.items) == 1
        before = resent()
        own_redis.start()
        await sent_again(limiter)
        assert await charged(peek, plan) == ONE and since(before) == NONE  # summed anew, not sent again


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    nodes = RedisCluster().start()
    yield nodes
    nodes.close()


async def test_on_redis_cluster_a_settlement_that_ran_unanswered_is_charged_once(cluster: RedisCluster) -> None:
    """One call per team through the cluster client, whose own retries after a timeout send the
    call again too: the team's node stalled, then resumed, runs it once."""
    peek: Any = aioredis.RedisCluster.from_url(cluster.url)
    try:
        async with limiter_on(cluster.url, cluster=True) as limiter:
            plan = await admitted(limiter, peek)
            before = resent()
            port = peek.get_node_from_key(plan.usage_key).port
            pid = stalled(next(n for n in cluster.nodes if n.port == port))
            try:
                await unanswered(limiter, plan)
            finally:
                os.kill(pid, signal.SIGCONT)
            await eventually(lambda: ran(peek, plan), "the stalled call run")
            await sent_again(limiter)
            assert await charged(peek, plan) == ONE
            found = since(before)  # the client's own resends may have found the record too
            assert found["applied"] == 0 and found["duplicate"] >= 1, found
    finally:
        await peek.aclose()


async def test_on_redis_cluster_a_settlement_whose_answer_was_lost_is_charged_once(
    cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The team's node runs the call and its connection is lost before the answer is read, on every
    try the cluster client makes by itself: its last error (a connection error) does not say the call
    ran, so it is kept whole, and sent again it changes nothing."""
    from redis.asyncio.cluster import ClusterNode
    from redis.exceptions import ConnectionError as RedisConnectionError

    peek: Any = aioredis.RedisCluster.from_url(cluster.url)
    answer = ClusterNode.execute_command
    lose: set[int] = set()  # the ports whose script answers are lost

    async def lost(node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        result = await answer(node, *args, **kwargs)
        if node.port in lose and args[0] == "EVALSHA":
            await node.disconnect()
            raise RedisConnectionError("Connection closed by server.")
        return result

    monkeypatch.setattr(ClusterNode, "execute_command", lost)
    try:
        # no timeout cuts a call short: what is lost is the answer the fault drops
        async with limiter_on(cluster.url, cluster=True, timeout_ms=10_000) as limiter:
            plan = await admitted(limiter, peek)
            before = resent()
            lose.add(peek.get_node_from_key(plan.usage_key).port)
            await unanswered(limiter, plan)
            assert await charged(peek, plan) == ONE  # it ran (each try after the first found its record)
            lose.clear()
            await sent_again(limiter)
            assert await charged(peek, plan) == ONE
            found = since(before)
            assert found["applied"] == 0 and found["duplicate"] >= 1, found
    finally:
        await peek.aclose()

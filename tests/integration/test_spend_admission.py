"""Budgets in the admission itself, against a real Redis and no gateway: failing closed or open while
Redis is out and the spend made meanwhile reaching it once back (``scripts.ADOPT``), a rolling window's
slices, and every limit kind with two budgets still one script call per admission."""

from __future__ import annotations

import contextlib
import uuid
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import redis.asyncio as aioredis

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.limits.admission import Admission, Ask, Settings, TeamPolicy, running
from gateway.limits.budget_rules import rules
from gateway.limits.costs import Spend
from gateway.limits.limiter import LimitsUnavailable
from gateway.limits.plan import LimitValues, new_lease, planned, tag
from gateway.limits.plan import layout as plan_layout
from gateway.limits.store import RedisLimiter
from gateway.runtime.spend_config import Budget
from tests.integration.spend_rig import ZONE, budget_spent, cost, outage_admission, settled, team_ask
from tests.support import eventually
from tests.support.redis_servers import RedisServer


async def test_budgets_fail_closed_or_open_and_spend_made_meanwhile_reaches_redis(own_redis: RedisServer) -> None:
    """``closed`` (the default): 503 while Redis is down. ``open``: admitted on this process's share,
    and the requests' whole cost is settled into the Redis budget once it answers again."""
    server = own_redis
    request = InternalRequest(
        Operation.COMPLETION, model="m", prompts=("alpha beta gamma",), sampling=Sampling(max_tokens=20)
    )
    ask = team_ask(request)
    async with (
        outage_admission(server.url, "closed") as (closed, _),
        outage_admission(server.url, "open") as (admission, limiter),
    ):
        async with running(admission):
            await admission.admit(ask)  # connected before the outage
            await closed.admit(ask)
            server.stop()
            with pytest.raises(LimitsUnavailable, match="spend cannot be checked"):
                await closed.admit(ask)
            for _ in range(5):
                plan = await admission.admit(ask)
                assert admission.release(plan, 3, 7, 0, "m", "up") == cost(3, 7)
            assert not limiter.up
            await eventually(lambda: limiter.held() == 5 and not admission.pending, "five held, none pending")
            server.start()
            await eventually(lambda: not limiter.held() and limiter.outage.since is None, "all given back, no outage")
        assert await budget_spent(server.url, "a") == 5 * cost(3, 7)  # Redis restarted empty: theirs alone
        assert (await settled(server.url, "a", 5))["spend"] == 5 * cost(3, 7)


async def test_requests_admitted_during_an_outage_are_added_to_redis_when_it_returns(own_redis: RedisServer) -> None:
    """``open``: requests admitted in process while Redis was out and still running when it answers
    again are added to its budgets and concurrency leases (``scripts.ADOPT``), so another gateway is
    refused what they hold rather than walking the budget past its amount; settled, they leave
    exactly their cost and nothing held."""
    server = own_redis
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("alpha",), sampling=Sampling(max_tokens=20))
    ask = team_ask(request)
    amount, conc = Decimal("0.003"), LimitValues(concurrency=8)  # 3000 millionths; a worst case is 670
    async with (
        outage_admission(server.url, "open", amount, conc) as (here, limiter),
        outage_admission(server.url, "open", amount, conc) as (other, _),
        contextlib.aclosing(aioredis.Redis.from_url(server.url)) as peek,
        running(here),
        running(other),
    ):
        await here.admit(ask)  # connected before the outage
        server.stop()
        outage = [await here.admit(ask) for _ in range(3)]  # this process's share; they keep running
        assert not limiter.up
        server.start()  # empty: only what comes back to it counts
        await eventually(lambda: limiter.up, "the breaker closed")
        later = await here.admit(ask)  # first adds the three running ones
        want = later.cost_estimate
        assert await budget_spent(server.url, "a") == 4 * want
        assert await peek.zcard(f"{tag('a')}:budget:held") == 4 and await peek.zcard(f"{tag('a')}:conc") == 4
        with pytest.raises(GatewayError) as refused:  # 4 x 670 held of 3000: no room for a fifth
            await other.admit(ask)
        assert refused.value.status == 429 and "budget of 0.003000 EUR" in str(refused.value), refused.value
        for plan in [*outage, later]:
            here.release(plan, 3, 7, 0, "m", "up")
        spent = await settled(server.url, "a", 4)
        assert spent["spend"] == await budget_spent(server.url, "a") == 4 * cost(3, 7)
        assert await peek.zcard(f"{tag('a')}:budget:held") == 0 and await peek.zcard(f"{tag('a')}:conc") == 0
        assert await other.admit(ask)  # the room is back


async def test_a_rolling_budget_sums_its_slices_and_drops_older_fields(client: aioredis.Redis) -> None:
    """The script against Redis directly: spend in the window's slices counts, older spend does not and
    is pruned once the hash holds many fields."""
    team, day = f"t-{uuid.uuid4().hex[:8]}", 86400
    budget = Budget(tokens=100, period="rolling", window_seconds=12 * day)  # slices of a day
    limits = plan_layout(team, "k1", LimitValues(), LimitValues(), tuple(rules(budget, ZoneInfo(ZONE), "EUR")))
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("x",), sampling=Sampling(max_tokens=7))
    first = planned(team, "k1", limits, request, new_lease())  # 10 tokens' worst case (a prompt of 3): 95 of 100
    window = first.windows[0]
    assert window is not None
    starts = [int(f.split(":")[0]) for f in window.fields]
    key = limits.keys[0]
    old = {f"{starts[-1] - day * (i + 1)}:t": 1000 for i in range(70)}  # before the window: not counted
    await client.hset(key, mapping={**old, f"{starts[5]}:t": 40, f"{starts[-1]}:t": 45})
    limiter = RedisLimiter(client)
    assert await limiter.admit(first, 1000) is None
    fields = {k.decode(): int(v) for k, v in (await client.hgetall(key)).items()}
    assert fields == {f"{starts[5]}:t": 40, f"{starts[-1]}:t": 45, f"{starts[0]}:t": 10}
    refused = await limiter.admit(planned(team, "k1", limits, request, new_lease()), 1000)
    assert refused is not None and refused.remaining == 5 and refused.check.kind == "bud"
    await client.delete(key)


async def test_an_admission_with_budgets_is_one_redis_call(redis_server: RedisServer) -> None:
    """Every limit kind and two budgets (team money, key tokens): still one script call per admission."""
    zone = ZoneInfo(ZONE)
    policy = TeamPolicy(
        LimitValues(rpm=1000, tpm=10**6, concurrency=50),
        LimitValues(),
        None,
        tuple(rules(Budget(amount=Decimal(5)), zone, "EUR")),
        tuple(rules(Budget(tokens=10**6, period="day"), zone, "EUR")),
    )
    client = aioredis.Redis.from_url(redis_server.url)
    admission = Admission(RedisLimiter(client), {"a": policy}, Settings(), Spend())
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("alpha",), sampling=Sampling(max_tokens=5))

    async def calls() -> int:
        stats = await client.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))

    try:
        await admission.admit(Ask("a", "k1", request))  # loads the script
        before = await calls()
        plans = [await admission.admit(Ask("a", "k1", request)) for _ in range(10)]
        assert await calls() - before == 10
        assert all(len(p.checks) == 5 and p.spent for p in plans)
    finally:
        await client.aclose()

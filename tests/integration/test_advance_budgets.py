"""Admissions made ahead under a budget (``gateway.limits.advance``) against a real Redis: each unit of
a reserve holds its own reservation of the worst case, so a team key's back-to-back requests are
admitted without a round trip while Redis counts every reservation; a hard budget is never walked
past across replicas, what nobody took comes back exactly, and a dead replica's units come back
with their lease TTL, each reservation leaving once (by settlement, giving back or expiry)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from zoneinfo import ZoneInfo

import pytest
import redis.asyncio as aioredis

from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.limits import advance
from gateway.limits.budget_rules import rules
from gateway.limits.limiter import Settlement
from gateway.limits.plan import Layout, LimitValues, Plan, new_lease, planned
from gateway.limits.plan import layout as plan_layout
from gateway.limits.store import RedisLimiter
from gateway.runtime.spend_config import Budget
from tests.integration.test_advance_admission import answered, reserve_ready, sized
from tests.integration.test_reservation_expiry import expired, used
from tests.support import eventually

TTL = 30_000
WANT = 20  # a plan's worst case: 3 prompt tokens and 17 completion tokens


def budget_plans(n: int, team: str, tokens: int = 1000, soft: bool = False) -> list[Plan]:
    budget = Budget(tokens=tokens, period="day", mode="soft" if soft else "hard")
    limits = plan_layout(team, "k1", LimitValues(), LimitValues(), tuple(rules(budget, ZoneInfo("UTC"), "EUR")))
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("x",), sampling=Sampling(max_tokens=17))
    return [planned(team, "k1", limits, request, new_lease()) for _ in range(n)]


def new_team() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def test_back_to_back_budgeted_requests_take_reservations_made_ahead(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sized(monkeypatch, 4)
    limiter = RedisLimiter(client, advance=True)
    batch = budget_plans(4, new_team())
    assert batch[0].estimate == WANT
    for p in batch[:2]:
        assert await limiter.admit(p, TTL) is None
    await reserve_ready(limiter)
    reserve = next(iter(limiter.reserves.ready.values()))  # type: ignore[union-attr]
    assert reserve.units == 4 and await used(client, batch[0]) == (2 + 4) * WANT
    before = limiter.batches
    for p in batch[2:]:
        assert await limiter.admit(p, TTL) is None
    assert limiter.batches == before  # from the reserve, no round trip
    held, window = f"{batch[0].checks[0].key}:held", batch[0].windows[0]
    assert window is not None
    assert [p.lease for p in batch[2:]] == [reserve.lease(1), reserve.lease(2)]
    for p in batch[2:]:  # each unit's reservation is the one its request renews and settles
        assert p.held(0, p.checks[0]) == f"{p.lease}|{window.add}|{WANT}"
        assert await client.zscore(held, p.held(0, p.checks[0])) is not None
        assert p.spent[0] == (2 + 4) * WANT  # the gauge's figure: the spend with every unit's worst case
    assert await client.zcard(held) == 2 + 4
    await limiter.settle([Settlement(p, 0, 1, 2) for p in batch], urgent=True)  # 3 tokens each
    await limiter.close()  # the two units nobody took go back
    assert await used(client, batch[0]) == 4 * 3 and await client.zcard(held) == 0


async def test_two_replicas_never_walk_past_a_hard_budget(client: aioredis.Redis) -> None:
    other = aioredis.Redis.from_url("redis://127.0.0.1:6379/13", socket_timeout=2)
    async with contextlib.aclosing(other):
        replicas = [RedisLimiter(client, advance=True), RedisLimiter(other, advance=True)]
        team = new_team()
        admitted = 0
        for i, p in enumerate(budget_plans(70, team)):  # 1000 tokens: room for 50 worst cases
            if await replicas[i % 2].admit(p, TTL) is None:
                admitted += 1
            await answered(replicas[i % 2])
            assert await used(client, p) <= 1000
        assert admitted <= 50
        for limiter in replicas:
            await limiter.close()
        plain = RedisLimiter(client)
        after = [await plain.admit(p, TTL) for p in budget_plans(60, team)]
        assert admitted + after.count(None) == 50  # what was held ahead came back, exactly


async def test_a_soft_budget_is_not_gone_past_ahead(client: aioredis.Redis) -> None:
    limiter = RedisLimiter(client, advance=True)
    for p in budget_plans(8, new_team(), tokens=100, soft=True):
        assert await limiter.admit(p, TTL) is None  # soft: every request admitted
        await answered(limiter)
        if p.over is None:
            assert await used(client, p) <= 100  # reserves only within the limit
    assert await used(client, p) == 8 * WANT and p.over is not None  # past it only by requests on their path
    await limiter.close()


async def test_a_dead_replicas_units_come_back_once(client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    sized(monkeypatch, 4)
    dead = RedisLimiter(client, advance=True)
    team = new_team()
    batch = budget_plans(2, team)
    for p in batch:
        assert await dead.admit(p, 300) is None  # leases of 300 ms, never renewed: a replica that died
    await reserve_ready(dead)
    assert dead._sweep is not None
    dead._sweep.cancel()  # given back below, once its units expired
    held = f"{batch[0].checks[0].key}:held"
    assert await used(client, batch[0]) == 6 * WANT
    await eventually(lambda: expired(client, held, 6), "the requests' and the units' reservations expired")
    alive = budget_plans(1, team)[0]
    assert await RedisLimiter(client).admit(alive, TTL) is None  # takes every expired one back first
    assert await used(client, alive) == WANT and await client.zcard(held) == 1
    monkeypatch.setattr(advance, "RESERVE_SECONDS", 0.0)  # the dead one's reserve is stale: given back
    dead._give_back_stale()
    await asyncio.gather(*dead._tasks)
    assert await used(client, alive) == WANT  # taken back by expiry already: nothing twice
    await dead.close()


def one_layout(tokens: int) -> Layout:
    """A new team key's layout under a hard token budget: its plans share it (and its windows), as a
    key's requests do."""
    budget = Budget(tokens=tokens, period="day")
    return plan_layout(new_team(), "k1", LimitValues(), LimitValues(), tuple(rules(budget, ZoneInfo("UTC"), "EUR")))


def plan_in(limits: Layout, max_tokens: int) -> Plan:
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("x",), sampling=Sampling(max_tokens=max_tokens))
    return planned(limits.keys[0].split("{")[1].split("}")[0], "k1", limits, request, new_lease())


async def budget_sum(client: aioredis.Redis, limits: Layout) -> int:
    """What the budget counts now: settled spend and the worst cases still reserved."""
    return sum(int(v) for v in (await client.hgetall(limits.keys[0])).values())


@pytest.mark.parametrize("seed", range(6))
async def test_replicas_with_reserves_of_mixed_sizes_never_walk_past_a_hard_budget(
    client: aioredis.Redis, seed: int
) -> None:
    """Random sizes, replicas and orders, settlements among admissions: what the budget counts
    (settled spend and reserved worst cases) never passes its limit, and once both replicas close it
    is exactly what was settled."""
    rng = random.Random(seed)
    limits = one_layout(600)
    replicas = [RedisLimiter(client, advance=True), RedisLimiter(client, advance=True)]
    running: list[Plan] = []
    spent, ahead = 0, 0
    for _ in range(60):
        if running and rng.random() < 0.4:
            p = running.pop(rng.randrange(len(running)))
            completion = rng.randint(0, p.estimate - p.prompt_estimate)  # at most the unit's worst case
            await replicas[0].settle([Settlement(p, 0, p.prompt_estimate, completion)], urgent=True)
            spent += p.prompt_estimate + completion
        else:
            p = plan_in(limits, rng.choice((4, 8, 16, 40)))
            if await replicas[rng.randrange(2)].admit(p, TTL) is None:
                running.append(p)
                ahead += "." in p.lease
        assert await budget_sum(client, limits) <= 600
        for r in replicas:
            await answered(r)
    assert ahead > 0  # units of reserves were taken: the test saw them
    for p in running:
        await replicas[0].settle([Settlement(p, 0, p.prompt_estimate, 0)], urgent=True)
        spent += p.prompt_estimate
    for r in replicas:
        await r.close()
    assert await budget_sum(client, limits) == spent
    assert await client.zcard(f"{limits.keys[0]}:held") == 0


async def two_small_then_large(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> tuple[Layout, RedisLimiter, list[Plan], Plan]:
    """A 200-token budget with two small requests admitted (their replica asks for a reserve) and a
    large one, not yet admitted, that fits only if no unit is held."""
    sized(monkeypatch, 8)
    limits = one_layout(200)
    limiter = RedisLimiter(client, advance=True)
    small = [plan_in(limits, 4) for _ in range(2)]
    for p in small:
        assert await limiter.admit(p, TTL) is None
    return limits, limiter, small, plan_in(limits, 200 - 2 * small[0].estimate - small[0].prompt_estimate)


async def test_a_larger_request_is_not_refused_for_units_its_replica_is_being_granted(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the reserve asked for after the second small request is still out when the large one is
    # admitted: Redis counts the reserve first (the same connection, in order) and refuses the large
    # one; the reserve's answer came first too, so its replica gives those units back and asks again
    limits, limiter, small, large = await two_small_then_large(client, monkeypatch)
    assert limiter.reserves is not None and limiter.reserves.asking  # not answered yet
    assert large.estimate == 200 - 2 * small[0].estimate  # fits only if no unit is held
    assert await limiter.admit(large, TTL) is None and "." not in large.lease
    await limiter.settle([Settlement(p, 0, p.prompt_estimate, 0) for p in [*small, large]], urgent=True)
    await limiter.close()
    assert await budget_sum(client, limits) == sum(p.prompt_estimate for p in [*small, large])


async def test_units_given_back_for_a_request_whose_client_went_away_meanwhile_come_back(
    client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request refused by a budget while its replica holds units it does not fit in has them given
    back first; its client gone (the task cancelled) as that starts, they still go back at once, not
    with their lease TTL (the give-back's calls were cancelled before they went out)."""
    limits, limiter, small, large = await two_small_then_large(client, monkeypatch)
    await reserve_ready(limiter)
    giving = asyncio.Event()
    give_back_all = limiter._give_back_all

    async def spied(reserves: list[advance.Reserve]) -> None:
        giving.set()
        await give_back_all(reserves)

    monkeypatch.setattr(limiter, "_give_back_all", spied)
    admitting = asyncio.create_task(limiter.admit(large, TTL))
    await giving.wait()
    admitting.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await admitting
    assert limiter.reserves is not None and not limiter.reserves.ready
    await limiter.settle([Settlement(p, 0, p.prompt_estimate, 0) for p in small], urgent=True)
    await limiter.close()
    assert await budget_sum(client, limits) == 2 * small[0].prompt_estimate  # no unit left reserved
    assert await client.zcard(f"{limits.keys[0]}:held") == 0

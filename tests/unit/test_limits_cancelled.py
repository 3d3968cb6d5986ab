"""Limits work a cancellation cuts: settling at shutdown has a bound (``admission.SETTLE_SECONDS``), a
round that outlives it is cut and its requests counted as of unknown fate (their calls may have run),
and what requests released meanwhile still goes out in a last round, never dropped unsaid; the
adoption of requests admitted in process during an outage runs to its end whichever request it runs
for is cancelled. The Redis limiter's calls are the test's own (no IO); settling on a virtual clock.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from gateway.core.request import InternalRequest, Operation
from gateway.limits.admission import Admission, Settings, TeamPolicy, running
from gateway.limits.failover import FailoverLimiter
from gateway.limits.limiter import SettleCall, Settlement
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import LimitValues, Plan, layout, new_lease, planned
from gateway.limits.store import Failed, RedisLimiter
from gateway.obs.metrics import LEASES_DROPPED, USAGE_DROPPED, USAGE_UNKNOWN
from tests.support import eventually
from tests.support.clock import VirtualClock, hang

REQUEST = InternalRequest(Operation.COMPLETION, model="m", prompts=("x",))
LIMITS = LimitValues(concurrency=10)


def plan() -> Plan:
    return planned("a", "k1", layout("a", "k1", LIMITS, LimitValues(), (), ()), REQUEST, new_lease())


class Stalled:
    """The Redis limiter's settlement calls: the first round never ends (a Redis stalled past every
    bound), the next ones land."""

    def __init__(self) -> None:
        self.rounds = 0
        self.landed: list[Settlement] = []

    async def settle_each(
        self, items: list[Settlement], urgent: bool = False, again: list[SettleCall] | None = None
    ) -> list[Failed]:
        self.rounds += 1
        if self.rounds == 1:
            await hang()
        self.landed += items
        return []


async def test_a_round_cut_at_shutdown_is_counted_and_what_was_released_meanwhile_lands(
    clock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis = RedisLimiter(aioredis.Redis())  # connects at its first command: none is sent
    stalled = Stalled()
    monkeypatch.setattr(redis, "settle_each", stalled.settle_each)
    admission = Admission(FailoverLimiter(redis, LocalLimiter(), {}), {"a": TeamPolicy(LIMITS)}, Settings())
    unknown, dropped, leases = USAGE_UNKNOWN.n, USAGE_DROPPED.n, LEASES_DROPPED.n
    first, second = plan(), plan()
    async with running(admission):
        admission.release(first, 3, 2)
        await eventually(lambda: stalled.rounds == 1, "the first round out")
        admission.release(second, 4, 1)  # waits for the round out
    assert [s.plan for s in stalled.landed] == [second]
    assert (stalled.landed[0].prompt, stalled.landed[0].completion) == (4, 1)
    assert USAGE_UNKNOWN.n - unknown == 1  # the cut round's request: its call may have run
    assert LEASES_DROPPED.n - leases == 1  # its lease expires with its TTL
    assert USAGE_DROPPED.n == dropped
    assert not admission.pending and not admission.usage


async def test_requests_adopted_for_a_request_whose_client_went_away_meanwhile_are_all_adopted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After an outage, the first admission adds the requests this process admitted meanwhile to Redis,
    one call each. Its client gone while the first call is out (the request cancelled), the others are
    still adopted: they were dropped from the list with none left to adopt them, so Redis's limits
    never counted them while they ran."""
    redis = RedisLimiter(aioredis.Redis())  # connects at its first command: none is sent
    limiter = FailoverLimiter(redis, LocalLimiter(), {})
    out, adopted = asyncio.Event(), []

    async def adopt(plan: Plan, lease_ttl_ms: int) -> None:
        if not adopted:
            await out.wait()
        adopted.append(plan)

    async def admit(plan: Plan, lease_ttl_ms: int) -> None:
        return None

    monkeypatch.setattr(redis, "adopt", adopt)
    monkeypatch.setattr(redis, "admit", admit)
    local = [plan() for _ in range(3)]
    for p in local:  # admitted by this process while Redis was out
        limiter.via_local.add(p.lease)
        limiter.to_adopt[p.lease] = p
    admitting = asyncio.create_task(limiter.admit(plan(), 30_000))
    await eventually(lambda: limiter.to_adopt == {}, "the adoption under way")
    admitting.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await admitting
    out.set()
    await eventually(lambda: len(adopted) == 3, "every request adopted")
    assert not limiter.via_local

"""Settling at shutdown: the settler has a bound (``admission.SETTLE_SECONDS``); a round that outlives
it is cut and its requests counted as of unknown fate (their calls may have run), and what requests
released meanwhile still goes out in a last round, never dropped unsaid. On a virtual clock, with the
Redis limiter's calls the test's own (no IO)."""

from __future__ import annotations

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

"""Admissions made ahead: while a team key's requests come back to back, this replica admits its next
request in Redis before it arrives, so that request is admitted without a round trip on its path.

An admission made ahead (a *reserve*) is an ordinary admission in Redis: one arrival under each
requests-per-minute limit, a token estimate under each tokens-per-minute limit, a lease under each
concurrency limit. Limits stay exact across replicas (nothing is admitted that Redis did not count);
what changes is when a unit is taken. Redis grants a reserve only while every limit keeps at least half
its room after it (``scripts.ADMIT``'s ``ahead``), so near a limit each request is admitted on its own
path, as without reserves. A reserve nobody takes within ``RESERVE_SECONDS`` is given back; until then
it is at most one request, one token estimate and one concurrency slot per team key and replica.

Sans-IO: the bookkeeping only; ``RedisLimiter`` makes the calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from random import getrandbits

from gateway.limits.plan import Plan

RESERVE_SECONDS = 1.0  # a reserve unused this long is given back; and "back to back" means within it


def new_lease() -> str:
    return f"{getrandbits(96):024x}"


@dataclass(slots=True)
class Reserve:
    plan: Plan  # the admission made ahead: its keys, token estimate and lease
    made: float  # time.monotonic()


@dataclass(slots=True)
class Reserves:
    """Per team key (its limits' keys): the reserve ready, whether one is being asked for, and when its
    last request came."""

    ready: dict[tuple[str, ...], Reserve] = field(default_factory=dict)
    asking: set[tuple[str, ...]] = field(default_factory=set)
    seen: dict[tuple[str, ...], float] = field(default_factory=dict)

    def take(self, plan: Plan) -> bool:
        """Admit ``plan`` on this team key's reserve, if there is one its token estimate fits in: the plan
        then carries the reserve's lease and estimate (what Redis holds for it, which settlement corrects)."""
        keys = plan.layout.keys
        reserve = self.ready.get(keys)
        if reserve is None or (plan.layout.tokens and plan.estimate > reserve.plan.estimate):
            return False
        del self.ready[keys]
        plan.lease = reserve.plan.lease
        plan.estimate = reserve.plan.estimate
        return True

    def wanted(self, plan: Plan, now: float) -> Plan | None:
        """After ``plan`` was admitted: the admission to make ahead for this team key's next request,
        or None (one is ready or asked for, or its requests are not back to back)."""
        keys = plan.layout.keys
        last = self.seen.get(keys)
        self.seen[keys] = now
        if keys in self.ready or keys in self.asking or last is None or now - last > RESERVE_SECONDS:
            return None
        self.asking.add(keys)
        return Plan(plan.team, plan.key_id, plan.layout, plan.estimate, plan.prompt_estimate, new_lease(), "")

    def answered(self, ahead: Plan, granted: bool) -> None:
        keys = ahead.layout.keys
        self.asking.discard(keys)
        if granted:
            self.ready[keys] = Reserve(ahead, time.monotonic())

    def stale(self, now: float) -> list[Plan]:
        """Reserves unused for ``RESERVE_SECONDS``, removed: to be given back. A team key gone quiet
        leaves its ``seen`` entry here too."""
        old = [keys for keys, reserve in self.ready.items() if now - reserve.made >= RESERVE_SECONDS]
        plans = [self.ready.pop(keys).plan for keys in old]
        for keys in [keys for keys, last in self.seen.items() if now - last > RESERVE_SECONDS]:
            del self.seen[keys]
        return plans

    def drain(self) -> list[Plan]:
        plans = [reserve.plan for reserve in self.ready.values()]
        self.ready.clear()
        return plans

"""What the admission path calls a limiter: the interface every store implements (``store`` for Redis,
``local`` in process, ``failover`` between them), its results, and the error of no limits at all."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from gateway.core.errors import GatewayError
from gateway.core.records import record
from gateway.limits.plan import Check, Plan

# The most tokens one request's usage figure (prompt or completion) may count for: more than any
# model's context times any choice count, and far enough below 2**63 that Redis's integer counters
# (HINCRBY) and the scripts' token buckets (doubles, exact below 2**53) take any number of them.
MAX_TOKENS = 10**9


def tokens(value: object) -> int | None:
    """A usage figure as the limits take it: an integer from 0 to ``MAX_TOKENS`` (a larger or infinite
    one clamped to it, a negative one to 0, a fraction rounded down), or None (not a number: unknown).
    Whatever an upstream reports, a settlement's arguments stay ones Redis accepts."""
    if type(value) is int and 0 <= value <= MAX_TOKENS:  # what upstreams report
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return MAX_TOKENS if value > 0 else 0
    return max(0, min(MAX_TOKENS, int(value)))


class LimitsUnavailable(GatewayError):
    status = 503
    code = "limits_unavailable"
    retryable = True


Group = tuple[tuple[str, ...], str, str, str, str, tuple[object, ...]]


@record
class Settlement:
    """Finished requests of one plan (or, with no limits to correct, of one team key and hour summed):
    the token correction (actual - estimate) and their usage; with budgets or prices, the budgets'
    corrections (money in millionths, tokens: what the budgets hold for them less what they cost),
    their cost and the model and target it is counted under ("" : not priced)."""

    plan: Plan
    correction: int
    prompt: int
    completion: int
    requests: int = 1
    money: int = 0
    spent_tokens: int = 0
    cost: int = 0
    model: str = ""
    target: str = ""

    def summed(self, other: Settlement) -> Settlement:
        """Both together, under this one's plan (its lease)."""
        return Settlement(
            self.plan,
            self.correction + other.correction,
            self.prompt + other.prompt,
            self.completion + other.completion,
            self.requests + other.requests,
            self.money + other.money,
            self.spent_tokens + other.spent_tokens,
            self.cost + other.cost,
            self.model,
            self.target,
        )

    @property
    def group(self) -> Group:
        """What settlements must share to be summed into one script call (a budget's corrections go
        to the period each was admitted in)."""
        plan = self.plan
        return (plan.layout.keys, plan.usage_key, plan.key_id, self.model, self.target, plan.windows)


@dataclass(slots=True)
class SettleCall:
    """One SETTLE call as it first went out (``gateway.limits.scripts.SETTLE``): its keys, the last its
    id's record, its argument, the settlements it sums (whose leases it releases) and when it went out
    (``time.monotonic()``). One that may have run is sent again as it was: the script applies it once.
    Beside ``Settlement``, not in ``store``: the backlog holds it and talks to no Redis."""

    keys: tuple[str, ...]
    args: bytes
    settled: list[Settlement]
    sent: float

    @property
    def requests(self) -> int:
        return sum(s.requests for s in self.settled)


@record
class Refusal:
    check: Check
    retry_after: float | None  # seconds; None: the request can never fit this limit
    remaining: int = 0  # a budget's room left


class Limiter(Protocol):
    async def admit(self, plan: Plan, lease_ttl_ms: int) -> Refusal | None: ...

    async def settle(self, items: list[Settlement], urgent: bool = False) -> None:
        """Settle a batch of finished requests (one round trip for Redis). ``urgent``: requests here
        wait for the slots these free, so the round trip may not be put off."""
        ...

    def held(self) -> int:
        """Settlements kept for a store that did not answer, sent again by the next ``settle``."""
        ...

    async def renew(self, plans: list[Plan], lease_ttl_ms: int) -> None: ...

    async def usage(self, keys: list[str]) -> list[dict[str, int]]: ...

    async def close(self) -> None:
        """Give back what is held ahead of requests (``gateway.limits.advance``)."""
        ...

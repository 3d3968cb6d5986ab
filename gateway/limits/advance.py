"""Admissions made ahead: while a team key's requests come back to back, this replica admits its next
requests in Redis before they arrive, so they are admitted without a round trip on their path.

An admission made ahead (a *reserve*) is an ordinary admission in Redis of up to ``AHEAD_UNITS``
requests at once (*units*): per unit, one arrival under each requests-per-minute limit, a token
estimate under each tokens-per-minute limit, a lease under each concurrency limit, a reservation of the
worst case (money or tokens) under each budget. Limits and budgets stay exact
across replicas (nothing is admitted that Redis did not count); what changes is when a unit is taken.
Redis grants as many units as leave every limit at least half its room (``scripts.ADMIT``'s ``ahead``),
so near a limit each request is admitted on its own path, as without reserves (under a budget: as
many as leave half its remaining room, so a budget is never walked past ahead). A reserve's units
nobody takes within ``RESERVE_SECONDS`` are given back; until then it is at most ``AHEAD_UNITS``
requests, token estimates, concurrency slots and budget worst cases per team key and replica.

One round trip for several requests: a key's requests at concurrency 1 meet Redis's work (on the
path of the request that asks) once every few requests, not each time. A reserve asks for the
requests its key is expected to send within half its life (from the gap between its last two), so
that few units are given back: giving back returns a unit's tokens less the bucket's refill since,
which a key whose reserves went back unused again and again would keep losing.

Sans-IO: the bookkeeping only; ``RedisLimiter`` makes the calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.limits.plan import Plan, new_lease

RESERVE_SECONDS = 1.0  # a reserve's units unused this long are given back
# The most requests one admission made ahead asks for. Not 8: a key's 16 concurrent clients took 8
# units in a burst and the next 8 or more waited on their own round trips while the next reserve was
# asked for (38% admitted ahead; 32: 73%, the chat request with Redis limits -3% in instructions,
# docs/performance.md)
AHEAD_UNITS = 32
BACK_TO_BACK_SECONDS = 1.0  # requests of a team key this close together get reserves
_SEEN_MAX = 4096  # team keys remembered before the quiet ones are forgotten


def _fits_budgets(plan: Plan, made: Plan) -> bool:
    """Whether a unit of the reserve ``made`` holds enough for ``plan`` under its budgets: the same
    windows (a unit's reservation sits in the window it was made in, where settlement takes it back)
    and a worst case no dearer than the unit's."""
    return plan.windows is made.windows and plan.cost_estimate <= made.cost_estimate


def units_for(gap: float) -> int:
    """Units to ask for, for a key whose last two requests came ``gap`` seconds apart: the requests
    expected within half a reserve's life, at least one and at most ``AHEAD_UNITS``."""
    return max(1, min(AHEAD_UNITS, int(RESERVE_SECONDS / 2 / max(gap, 1e-6))))


@dataclass(slots=True)
class Reserve:
    plan: Plan  # the admission made ahead: its keys, token estimate (per unit) and lease (the units' base)
    made: float  # when Redis's answer came (time.monotonic(), as every ``now`` here)
    marks: list[int]  # what Redis answered: its time (ms), then per limit the arrival time it set (rpm)
    units: int = 1  # admitted by Redis
    taken: int = 0  # of them, by requests (in order: unit ``u`` is the ``taken``-th + 1)

    @property
    def spent(self) -> tuple[int, ...]:
        """Per check, a budget's spend with every unit's worst case, as Redis answered (the gauges'
        figure for the requests that take a unit; 0 or an arrival time for the other kinds)."""
        return tuple(self.marks[1:])

    def lease(self, unit: int) -> str:
        """Unit ``unit``'s concurrency lease (1-based), as ADMIT named it."""
        return f"{self.plan.lease}.{unit}"

    @property
    def left(self) -> list[str]:
        """The leases of the units no request took."""
        return [self.lease(u) for u in range(self.taken + 1, self.units + 1)]


@dataclass(slots=True)
class Reserves:
    """Per team key (its limits' keys): the reserve ready, whether one is being asked for, and when its
    last request came."""

    ready: dict[tuple[str, ...], Reserve] = field(default_factory=dict)
    asking: set[tuple[str, ...]] = field(default_factory=set)
    seen: dict[tuple[str, ...], float] = field(default_factory=dict)
    # admissions of each team key out to Redis on their requests' paths: while any is, the key's
    # requests come together (a burst), and a reserve asked for then could be answered after the last
    # of them, held by no request while Redis refuses others
    on_path: dict[tuple[str, ...], int] = field(default_factory=dict)

    def take(self, plan: Plan, now: float, max_age: float) -> bool:
        """Admit ``plan`` on this team key's reserve, if there is one younger than ``max_age`` (its
        concurrency lease must outlive the wait for the lease keeper) that its token estimate fits in:
        the plan then carries the reserve's lease and estimate (what Redis holds for it, which
        settlement corrects). An older one waits to be given back."""
        keys = plan.layout.keys
        reserve = self.ready.get(keys)
        if reserve is None or now - reserve.made > max_age:
            return False
        made = reserve.plan
        if (plan.layout.tokens or plan.layout.budgets) and plan.estimate > made.estimate:
            return False
        if plan.layout.budgets and not _fits_budgets(plan, made):
            return False
        reserve.taken += 1
        if reserve.taken == reserve.units:
            del self.ready[keys]
        plan.lease = reserve.lease(reserve.taken)
        plan.estimate = made.estimate
        if plan.layout.budgets:  # the unit's reservation, as Redis holds it: settled to the real cost
            plan.cost_estimate = made.cost_estimate
            plan.spent = reserve.spent
        return True

    def wanted(self, plan: Plan, now: float, estimate: int, cost: int = 0) -> tuple[Plan, int] | None:
        """After ``plan`` was admitted: the admission to make ahead for this team key's next requests
        (reserving ``estimate`` tokens and a worst case of ``cost`` a unit: the request's own, not a
        reserve's it took) and how many
        units to ask for, or None (one is ready, its last unit not yet taken, or asked for, or its
        requests are not back to back)."""
        keys = plan.layout.keys
        last = self.seen.get(keys)
        if last is None and len(self.seen) >= _SEEN_MAX:
            self._forget(now)
        self.seen[keys] = now
        if keys in self.ready or keys in self.asking or last is None or now - last > BACK_TO_BACK_SECONDS:
            return None
        if self.on_path.get(keys):
            return None
        self.asking.add(keys)
        ahead = Plan(plan.team, plan.key_id, plan.layout, estimate, plan.prompt_estimate, new_lease(), "")
        if plan.layout.budgets:
            ahead.cost_estimate, ahead.windows = cost, plan.windows
        return ahead, units_for(now - last)

    def answered(self, ahead: Plan, granted: Reserve | None) -> None:
        """Redis granted ``ahead`` (the reserve it made) or not (None)."""
        keys = ahead.layout.keys
        self.asking.discard(keys)
        if granted is not None:
            self.ready[keys] = granted

    def stale(self, now: float) -> list[Reserve]:
        """Reserves made ``RESERVE_SECONDS`` ago or more, removed: their units left to be given back."""
        old = [keys for keys, reserve in self.ready.items() if now - reserve.made >= RESERVE_SECONDS]
        self._forget(now)
        return [self.ready.pop(keys) for keys in old]

    def _forget(self, now: float) -> None:
        for keys in [keys for keys, last in self.seen.items() if now - last > BACK_TO_BACK_SECONDS]:
            del self.seen[keys]

    def drain(self) -> list[Reserve]:
        reserves = list(self.ready.values())
        self.ready.clear()
        return reserves

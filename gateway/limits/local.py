"""Limit state in this process: the same algorithms as the Redis scripts, for the embedded default (no
Redis configured) and for Redis outages that fail open (``failover``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from gateway.limits.budget_rules import PRUNE_AFTER, Window
from gateway.limits.limiter import Refusal, Settlement
from gateway.limits.plan import Check, Layout, Plan

USAGE_FIELDS = ("requests", "prompt_tokens", "completion_tokens")
# A rate or concurrency check as ``record`` mirrors it: kind, key, this process's share of the limit,
# and for rpm the period between requests and the burst's span (burst times period)
Mirrored = tuple[str, str, int, float, float]
MAX_MIRRORED = 10_000  # layouts whose shares are kept (one per team key and config generation)


@dataclass(slots=True)
class LocalLimiter:
    """The same algorithms in process memory. ``divisor`` shares each limit among replicas."""

    divisor: int = 1
    values: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    leases: dict[str, dict[str, float]] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    spends: dict[str, dict[str, int]] = field(default_factory=dict)  # budget hashes: field -> amount
    # per budget key: the window and the spend Redis last answered an admission with (``record_spent``)
    seen: dict[str, tuple[Window, int]] = field(default_factory=dict)
    _names: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # per key id: its counters
    # Per layout (by id, the layout kept so its id is not reused): its mirrored checks' shares
    _mirrors: dict[int, tuple[Layout, int, list[Mirrored]]] = field(default_factory=dict)

    def _limit(self, check: Check) -> int:
        return max(1, math.ceil(check.limit / self.divisor))

    async def admit(self, plan: Plan, lease_ttl_ms: int) -> Refusal | None:
        now = time.monotonic() * 1000
        staged: list[tuple[Check, float]] = []
        budgets: list[tuple[Check, Window, int]] = []
        spent: list[int] = []
        for i, c in enumerate(plan.checks):
            limit = self._limit(c)
            spent.append(0)
            if c.kind == "bud":
                window, rule = plan.windows[i], c.rule
                assert window is not None and rule is not None
                want = plan.cost_estimate if rule.unit == "m" else plan.estimate
                fields = self.spends.get(c.key, {})
                used = sum(fields.get(f, 0) for f in window.fields)
                limit = self._room(c, window)
                if used + want > limit:
                    if not rule.soft:
                        return Refusal(c, max(0.0, window.reset - time.time()), limit - used)
                    plan.over = plan.over or c
                budgets.append((c, window, want))
                spent[i] = used + want
            elif c.kind == "rpm":
                period, burst = 60000 / limit, max(1, math.ceil(int(c.burst) / self.divisor))
                new_tat = max(self.values.get(c.key, 0.0), now) + period
                if new_tat - now > burst * period:
                    return Refusal(c, (new_tat - now - burst * period) / 1000)
                staged.append((c, new_tat))
            elif c.kind == "tpm":
                want = plan.estimate
                if want > limit:
                    return Refusal(c, None)
                level = self._level(c.key, limit, now)
                if level < want:
                    return Refusal(c, (want - level) * 60 / limit)
                staged.append((c, level - want))
            else:
                held = {k: v for k, v in self.leases.get(c.key, {}).items() if v > now}
                self.leases[c.key] = held
                if len(held) >= limit:
                    return Refusal(c, 0.1)
                staged.append((c, now + lease_ttl_ms))
        for c, value in staged:
            if c.kind == "rpm":
                self.values[c.key] = value
            elif c.kind == "tpm":
                self.buckets[c.key] = (value, now)
            else:
                self.leases[c.key][plan.lease] = value
        for c, window, want in budgets:
            self._spend(c.key, window, want)
        if budgets:
            plan.spent = tuple(spent)
        return None

    def record(self, plan: Plan, lease_ttl_ms: int) -> None:
        """What another store (Redis) admitted for this process, mirrored without a refusal: should
        that store fail open, this process's share starts from what it already holds and used, not
        from zero (else the share and the leases held in Redis would both count as free). A rate is
        mirrored up to a full bucket at most, so a busy process is not held back past one window."""
        now = time.monotonic() * 1000
        for kind, key, limit, period, span in self._mirrored(plan.layout):
            if kind == "rpm":
                self.values[key] = min(max(self.values.get(key, 0.0), now) + period, now + span)
            elif kind == "tpm":
                self.buckets[key] = (max(0.0, self._level(key, limit, now) - plan.estimate), now)
            else:
                self.leases.setdefault(key, {})[plan.lease] = now + lease_ttl_ms

    def _room(self, check: Check, window: Window) -> int:
        """This process's share of a budget: of what Redis last said was left in this window (spent
        there already, by every replica), else of the whole amount."""
        seen = self.seen.get(check.key)
        spent = seen[1] if seen is not None and seen[0].add in window.fields else 0
        return max(0, math.ceil((check.limit - spent) / self.divisor))

    def record_spent(self, plan: Plan) -> None:
        """Redis admitted ``plan`` and answered each budget's spend (``Plan.spent``): should it fail
        open, this process's share is of what was left then, not of the whole budget from zero (an
        outage near a month's end would admit another budget a replica)."""
        for i, spent in enumerate(plan.spent):
            if (window := plan.windows[i]) is not None:
                self.seen[plan.checks[i].key] = (window, spent)

    def _mirrored(self, layout: Layout) -> list[Mirrored]:
        """``layout``'s rate and concurrency checks with this process's shares, worked out once."""
        known = self._mirrors.get(id(layout))
        if known is not None and known[0] is layout and known[1] == self.divisor:
            return known[2]
        mirrored: list[Mirrored] = []
        for c in layout.checks:
            if c.kind in ("rpm", "tpm", "conc"):
                limit = self._limit(c)
                period = 60000 / limit
                burst = max(1, math.ceil(int(c.burst) / self.divisor)) if c.kind == "rpm" else 0
                mirrored.append((c.kind, c.key, limit, period, burst * period))
        if len(self._mirrors) >= MAX_MIRRORED:  # layouts of config generations gone
            self._mirrors.clear()
        self._mirrors[id(layout)] = (layout, self.divisor, mirrored)
        return mirrored

    def released(self, plan: Plan) -> None:
        """A mirrored (``record``) request ended: its concurrency slots are free here too."""
        for key in plan.concurrency_keys:
            self.leases.get(key, {}).pop(plan.lease, None)

    def handed_over(self, plan: Plan, mirrored: bool) -> None:
        """A request admitted here is counted in Redis now (``failover``): its budgets' worst case
        leaves this process's sums, as Redis holds it; its slots stay as a mirror's (``record``) where
        this process mirrors what Redis admits, and leave otherwise."""
        for i, c in enumerate(plan.checks):
            if c.kind == "bud" and c.rule is not None and (window := plan.windows[i]) is not None:
                self._spend(c.key, window, -(plan.cost_estimate if c.rule.unit == "m" else plan.estimate))
        if not mirrored:
            self.released(plan)

    def _spend(self, key: str, window: Window, amount: int) -> None:
        fields = self.spends.setdefault(key, {})
        fields[window.add] = fields.get(window.add, 0) + amount
        if len(fields) > PRUNE_AFTER:
            for name in [f for f in fields if int(f.split(":")[0]) < window.oldest]:
                del fields[name]

    def _level(self, key: str, limit: int, now: float) -> float:
        level, ts = self.buckets.get(key, (float(limit), now))
        return min(float(limit), level + (now - ts) * limit / 60000)

    async def settle(self, items: list[Settlement], urgent: bool = False) -> None:
        for s in items:
            self._settle_one(s)

    def _settle_one(self, s: Settlement) -> None:
        plan, correction = s.plan, s.correction
        now = time.monotonic() * 1000
        for i, c in enumerate(plan.checks):
            if c.kind == "tpm" and correction:
                self.buckets[c.key] = (self._level(c.key, self._limit(c), now) - correction, now)
            elif c.kind == "bud" and c.rule is not None and (window := plan.windows[i]) is not None:
                self._spend(c.key, window, s.money if c.rule.unit == "m" else s.spent_tokens)
            elif c.kind == "conc":
                self.leases.get(c.key, {}).pop(plan.lease, None)
        counts = self.counters.setdefault(plan.usage_key, {})
        names = self._names.get(plan.key_id) or self._key_names(plan.key_id)
        for (name, kname), value in zip(names, (s.requests, s.prompt, s.completion), strict=True):
            counts[name] = counts.get(name, 0) + value
            counts[kname] = counts.get(kname, 0) + value
        if s.model:  # as SETTLE counts spend
            for name in ("spend", f"key:{plan.key_id}:spend", f"model:{s.model}:spend", f"target:{s.target}:spend"):
                counts[name] = counts.get(name, 0) + s.cost

    def _key_names(self, key_id: str) -> list[tuple[str, str]]:
        names = self._names[key_id] = [(name, f"key:{key_id}:{name}") for name in USAGE_FIELDS]
        return names

    def held(self) -> int:
        return 0  # settled in memory: nothing is ever held

    async def renew(self, plans: list[Plan], lease_ttl_ms: int) -> None:
        now = time.monotonic() * 1000
        for plan in plans:
            for key in plan.concurrency_keys:
                if plan.lease in self.leases.get(key, {}):
                    self.leases[key][plan.lease] = now + lease_ttl_ms

    async def usage(self, keys: list[str]) -> list[dict[str, int]]:
        return [dict(self.counters.get(k) or self.spends.get(k, {})) for k in keys]

    async def close(self) -> None:
        return None

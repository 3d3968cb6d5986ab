"""Costs on the admission path, beside the limits: the worst-case price a budget reserves, a settled
request's cost, and what budgets say besides admitting — refusals in the client's terms, the
utilisation gauge of team budgets, and soft budgets gone past (a counter each time, a log line once per
budget and period, never per request). Key budgets have no gauge: issued keys are not a bounded label."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from gateway.core.errors import RateLimited
from gateway.core.upstream import Upstream
from gateway.limits.budget_rules import refusal as refusal_of
from gateway.limits.limiter import Refusal
from gateway.limits.plan import Check, Layout, Plan
from gateway.limits.prices import PriceTable, Rate
from gateway.obs.metrics import BUDGET_EXCEEDED, LevelTally, budget_use

log = logging.getLogger("gateway.limits")
UNITS = {"m": "money", "t": "tokens"}
MAX_LAYOUTS = 10_000  # team keys whose gauges are kept (one layout per team key and config generation)
Gauges = list[tuple[int, LevelTally, int]]  # per team budget of a layout: its check's index, gauge, limit


class Spend:
    """``prices``: the start-up config's table; each request is priced with its generation's
    (``Policies.prices``), which a reload replaces."""

    def __init__(self, prices: PriceTable | None = None) -> None:
        self.prices = prices if prices is not None else PriceTable()
        self.said: set[tuple[str, str]] = set()  # (budget key, period field) whose excess was logged
        self._gauges: dict[int, tuple[Layout, Gauges]] = {}  # per layout (by id, kept)

    @staticmethod
    def worst(prices: PriceTable, model: str, targets: Sequence[Upstream]) -> Rate | None:
        """The dearest price among the route's targets (a fallback may answer), None with no prices."""
        return prices.worst(model, tuple([t.name for t in targets])) if prices else None

    @staticmethod
    def cost(
        prices: PriceTable,
        model: str,
        target: str,
        prompt: int,
        cached: int,
        completion: int,
        written: int = 0,
        embedding: bool = False,
    ) -> int | None:
        """What the answer of ``target`` cost, in millionths of the currency; None: not priced.
        ``embedding``: an embeddings request, charged at the model's embedding price."""
        if not (prices and target):
            return None
        rate = prices.rate(model, target)
        if rate is not None and embedding:
            rate = rate.for_embeddings()
        return rate.cost(prompt, cached, completion, written) if rate is not None else None

    def refused(self, plan: Plan, refusal: Refusal) -> RateLimited:
        """A budget refused ``plan``: its 429. A team budget's gauge shows the spend with this request's
        worst case, above 1, so an alert on 100% fires on refusals, not only on a budget spent to the
        millionth."""
        check = refusal.check
        assert check.rule is not None
        want = plan.cost_estimate if check.rule.unit == "m" else plan.estimate
        if check.scope == "team":
            budget_use(plan.team, UNITS[check.rule.unit]).n = (check.limit - refusal.remaining + want) / check.limit
        now = time.time()
        reset = now + (refusal.retry_after or 0)
        return refusal_of(check.scope, check.rule, check.limit, refusal.remaining, want, reset, now)

    def admitted(self, plan: Plan) -> None:
        """``plan`` was admitted with budgets: its ``spent`` holds each budget's spend."""
        spent = plan.spent
        for i, gauge, limit in self._team_gauges(plan):
            if i < len(spent):
                gauge.n = spent[i] / limit
        if plan.over is not None:
            self._over(plan, plan.over)

    def _team_gauges(self, plan: Plan) -> Gauges:
        """The team budgets' gauges of ``plan``'s layout, found once per layout, not per admission."""
        layout = plan.layout
        known = self._gauges.get(id(layout))
        if known is not None and known[0] is layout:
            return known[1]
        gauges = [
            (i, budget_use(plan.team, UNITS[c.rule.unit]), c.limit)
            for i, c in enumerate(layout.checks)
            if c.kind == "bud" and c.scope == "team" and c.rule is not None
        ]
        if len(self._gauges) >= MAX_LAYOUTS:  # layouts of config generations gone
            self._gauges.clear()
        self._gauges[id(layout)] = (layout, gauges)
        return gauges

    def _over(self, plan: Plan, over: Check) -> None:
        assert over.rule is not None
        BUDGET_EXCEEDED.labels(plan.team, over.scope).inc()
        window = plan.windows[plan.checks.index(over)]
        said = (over.key, window.add if window is not None else "")
        if said in self.said:
            return
        if len(self.said) > 10_000:  # a bound, not a cache: a repeated line now and then is fine
            self.said.clear()
        self.said.add(said)
        log.warning(
            "team %r: its %s soft budget of %s %s is exceeded; requests are still admitted",
            plan.team,
            over.scope,
            over.rule.amount(over.limit),
            over.rule.per,
        )

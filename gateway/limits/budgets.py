"""What budgets say besides refusals: the utilisation gauge of team budgets, and soft budgets gone
past (a counter each time, a log line once per budget and period, never per request). Key budgets
have no gauge: issued keys are not a bounded label."""

from __future__ import annotations

import logging

from gateway.limits.plan import Check, Plan
from gateway.obs.metrics import BUDGET_EXCEEDED, BUDGET_USE

log = logging.getLogger("gateway.limits")
UNITS = {"m": "money", "t": "tokens"}


class Notices:
    def __init__(self) -> None:
        self.said: set[tuple[str, str]] = set()  # (budget key, period field) whose excess was logged

    def refused(self, plan: Plan, check: Check, room: int) -> None:
        """A team budget refused ``plan``: its gauge shows the spend with this request's worst case,
        above 1 (an alert on 100% fires on the refusals, not only on a budget spent to the millionth)."""
        if check.scope == "team" and check.rule is not None:
            want = plan.cost_estimate if check.rule.unit == "m" else plan.estimate
            BUDGET_USE.labels(plan.team, UNITS[check.rule.unit]).set((check.limit - room + want) / check.limit)

    def admitted(self, plan: Plan) -> None:
        """``plan`` was admitted with budgets: its ``spent`` holds each budget's spend."""
        for check, spent in zip(plan.checks, plan.spent, strict=False):
            if check.kind == "bud" and check.scope == "team" and check.rule is not None:
                BUDGET_USE.labels(plan.team, UNITS[check.rule.unit]).set(spent / check.limit)
        over = plan.over
        if over is None or over.rule is None:
            return
        BUDGET_EXCEEDED.labels(plan.team, over.scope).inc()
        window = plan.windows[plan.checks.index(over)]
        said = (over.key, window.add if window is not None else "")
        if said not in self.said:
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

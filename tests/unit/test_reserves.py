"""The bookkeeping of admissions made ahead (``gateway.limits.advance``), sans IO."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from gateway.core.request import InternalRequest, Operation
from gateway.limits import plan as planning
from gateway.limits.advance import AHEAD_UNITS, Reserve, Reserves, units_for
from gateway.limits.budget_rules import rules
from gateway.limits.plan import LimitValues
from gateway.runtime.spend_config import Budget

REQUEST = InternalRequest(Operation.COMPLETION, "m", prompts=("hi",))


def test_none_is_asked_for_while_the_keys_own_admissions_are_out() -> None:
    # a burst: a reserve asked for now could be answered after its last request, held while Redis
    # refuses others; only the admission that finds none of its key's out asks
    plan = planning.build("t", "k", LimitValues(rpm=1000), LimitValues(), REQUEST, "l0")
    keys = plan.layout.keys
    reserves = Reserves()
    assert reserves.wanted(plan, 0.0, plan.estimate) is None  # the key's first request
    reserves.on_path[keys] = 1
    assert reserves.wanted(plan, 0.1, plan.estimate) is None
    del reserves.on_path[keys]
    wanted = reserves.wanted(plan, 0.2, plan.estimate)
    assert wanted is not None and keys in reserves.asking and wanted[0].lease != plan.lease


def test_a_reserve_asks_for_the_requests_expected_within_half_its_life() -> None:
    assert units_for(0.0006) == AHEAD_UNITS  # back to back at concurrency 1: the most
    assert units_for(0.1) == 5  # five more within half a second
    assert units_for(0.3) == units_for(0.9) == 1  # as before: one at a time


def test_a_reserves_units_go_in_order_and_the_last_one_empties_it() -> None:
    ahead = planning.build("t", "k", LimitValues(concurrency=10), LimitValues(), REQUEST, "base")
    keys = ahead.layout.keys
    reserves = Reserves()
    reserves.asking.add(keys)
    reserves.answered(ahead, Reserve(ahead, 0.0, [0, 0], units=3))
    assert not reserves.asking
    taken = []
    for i in range(4):
        plan = planning.build("t", "k", LimitValues(concurrency=10), LimitValues(), REQUEST, f"own{i}")
        if reserves.take(plan, 0.1, 1.0):
            taken.append(plan.lease)
        if i == 0:
            assert reserves.ready[keys].left == ["base.2", "base.3"]  # what would be given back
    assert taken == ["base.1", "base.2", "base.3"]  # ADMIT's names for them, each once
    assert keys not in reserves.ready  # used up: the next is asked for


def test_a_budgeted_unit_is_taken_only_by_a_worst_case_it_holds_in_the_same_window() -> None:
    budget = tuple(rules(Budget(amount="1000", tokens=10**9, period="day"), ZoneInfo("UTC"), "EUR"))
    layout = planning.layout("t", "k", LimitValues(), LimitValues(), budget)

    def plan(cost: int, lease: str, now: float = 0.0) -> planning.Plan:
        made = planning.planned("t", "k", layout, REQUEST, lease)
        made.cost_estimate = cost
        if now:  # the next day's windows
            made.windows = tuple(c.rule.period.window(c.rule.unit, now) for c in layout.checks if c.rule)
        return made

    ahead = plan(100, "base")
    reserves = Reserves()
    reserves.answered(ahead, Reserve(ahead, 0.0, [0, 700, 900], units=3))
    dearer, other_window = plan(101, "a"), plan(50, "b", now=ahead.windows[0].reset + 1)  # type: ignore[union-attr]
    assert not reserves.take(dearer, 0.1, 1.0) and not reserves.take(other_window, 0.1, 1.0)
    cheaper = plan(50, "c")
    assert reserves.take(cheaper, 0.1, 1.0)
    # what Redis holds for the unit: settled to the real cost, renewed under its own name
    assert (cheaper.lease, cheaper.cost_estimate, cheaper.spent) == ("base.1", 100, (700, 900))
    assert cheaper.held(0, cheaper.checks[0]) == f"base.1|{ahead.windows[0].add}|100"  # type: ignore[union-attr]

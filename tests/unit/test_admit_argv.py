"""ADMIT's argument from a team key's template (``gateway.limits.argv``) is byte for byte the generic
walk's (``store._args``), for every mix of limits and budgets."""

from __future__ import annotations

import time
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from gateway.limits.argv import Templates
from gateway.limits.budget_rules import rules
from gateway.limits.plan import LimitValues, Plan, layout, windows
from gateway.limits.store import _args
from gateway.runtime.spend_config import Budget

UTC = ZoneInfo("UTC")
limits = st.builds(
    LimitValues,
    st.none() | st.integers(1, 10**9),
    st.none() | st.integers(1, 10**9),
    st.none() | st.integers(1, 10**12),
    st.none() | st.integers(1, 10**6),
)
budgets = st.none() | st.builds(
    Budget,
    amount=st.none() | st.integers(1, 10**6),
    tokens=st.integers(1, 10**12),
    period=st.sampled_from(["day", "week", "month"]),
    mode=st.sampled_from(["hard", "soft"]),
)


@given(
    team=st.text('ab%|"\\{é', min_size=1, max_size=6),
    team_limits=limits,
    key_limits=limits,
    team_budget=budgets,
    key_budget=budgets,
    estimate=st.integers(0, 10**9),
    cost=st.integers(0, 10**12),
    extra=st.lists(st.integers(0, 10**6), min_size=1, max_size=2),
)
def test_the_template_writes_what_the_walk_writes(
    team: str,
    team_limits: LimitValues,
    key_limits: LimitValues,
    team_budget: Budget | None,
    key_budget: Budget | None,
    estimate: int,
    cost: int,
    extra: list[int],
) -> None:
    shape = layout(
        team,
        "k%1",
        team_limits,
        key_limits,
        tuple(rules(team_budget, UTC, "USD")),
        tuple(rules(key_budget, UTC, "USD")),
    )
    plan = Plan(team, "k%1", shape, estimate, 3, "00ab" * 6, "u", cost_estimate=cost)
    plan.windows = windows(shape, time.time()) if shape.budgets else ()
    templates = Templates()
    for _ in range(2):  # built, then reused
        packed = templates.args(plan, *extra)
        if packed is None:  # a budget's worst case of 0 holds nothing: left to the walk
            assert shape.budgets and (estimate == 0 or cost == 0)
        else:
            assert packed == _args(plan, *extra)


def test_a_new_window_gets_a_new_template() -> None:
    shape = layout("t", "k", LimitValues(tpm=5), LimitValues(), tuple(rules(Budget(tokens=9), UTC, "USD")))
    plan = Plan("t", "k", shape, 7, 3, "ab" * 12, "u")
    plan.windows = windows(shape, time.time())
    templates = Templates()
    assert templates.args(plan, 1) == _args(plan, 1)
    plan.windows = windows(shape, time.time() + 40 * 86400)  # next month's
    assert templates.args(plan, 1) == _args(plan, 1)

"""What the in-process fair queue's tests share (``test_fairq``, ``test_fairq_reserve``): tickets of
three teams in up to three classes, and the arrivals and services Hypothesis draws for them."""

from __future__ import annotations

from hypothesis import strategies as st

from gateway.limits.fairq import Ticket

TEAMS = ("a", "b", "c")

Op = tuple[str, str, int]  # ("arrive", team, class), ("serve", "", 0) or ("wait", "", 0)
ARRIVE = st.tuples(st.just("arrive"), st.sampled_from(TEAMS), st.integers(0, 1))
SERVE = st.tuples(st.just("serve"), st.just(""), st.just(0))
WAIT = st.tuples(st.just("wait"), st.just(""), st.just(0))


def ticket(team: str, rank: int = 0, weight: float = 1.0, deadline: float | None = None, rid: str = "") -> Ticket:
    return Ticket(rid or team, team, team, ("interactive", "batch", "bulk")[rank], rank, weight, deadline)

"""The fair queue's reserve (``queue.reserve``, ``gateway.limits.fairq.Reserve``): free slots kept from a
team whose requests alone wait while another team or a higher class came within the window, and never
a slot idle while someone else waits (Hypothesis); read from the config, kept below the capacity."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.limits.fairq import GRANTED, WAITING, LocalQueue, Reserve, Waiter
from gateway.limits.fairq_policy import fair_policy
from gateway.runtime.config import ConfigError, parse_config
from tests.unit.fair_tickets import ARRIVE, SERVE, WAIT, Op, ticket


class Tick:
    """A clock the test moves by hand (the reserve's window)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reserved(capacity: int, slots: int, window: float = 2.0, classes: int = 2) -> tuple[LocalQueue, Tick]:
    tick = Tick()
    return LocalQueue(capacity, 10_000, classes, Reserve(classes, slots, window, tick)), tick


async def test_the_reserve_keeps_the_last_free_slot_for_a_quiet_teams_next_arrival() -> None:
    """Four slots, reserve 1: a noisy backlog gets three while the quiet team sent a request within
    the window; the quiet team's next request takes the fourth at once, not at the next release."""
    queue, tick = reserved(capacity=4, slots=1)
    assert queue.take(ticket("quiet"))
    queue.release()  # the quiet team was here, and left
    noisy = [queue.join(ticket("noisy", rid=f"n{i}")) for i in range(6)]
    assert [n.state for n in noisy[:4]] == [GRANTED] * 3 + [WAITING]
    assert queue.running == 3
    tick.now += 1.0
    quiet = queue.join(ticket("quiet", rid="q"))  # behind nobody: the slot kept free is its own at once
    assert quiet.state == GRANTED and queue.running == 4
    queue.release()
    tick.now += 2.5  # the quiet team quiet for longer than the window: the next release gives it away
    queue.release()
    assert [n.state for n in noisy[:5]] == [GRANTED] * 5 and queue.running == 4


async def test_a_newcomer_alone_is_kept_from_the_reserve_too() -> None:
    queue, _ = reserved(capacity=2, slots=1)
    assert queue.take(ticket("quiet"))
    assert queue.take(ticket("noisy")) is False  # the last free slot, while the quiet team is active
    queue.release()
    assert queue.take(ticket("noisy"))  # two free: one goes


async def test_the_reserve_keeps_slots_from_a_lower_class_while_a_higher_one_is_active() -> None:
    queue, tick = reserved(capacity=3, slots=1)
    assert queue.take(ticket("chat", 0))
    queue.release()
    batch = [queue.join(ticket("etl", 1, rid=f"b{i}")) for i in range(4)]
    assert [b.state for b in batch] == [GRANTED, GRANTED, WAITING, WAITING]
    assert queue.join(ticket("chat", 0, rid="c")).state == GRANTED
    tick.now += 3.0
    queue.release()  # the interactive class quiet past the window: batch takes the last slot again
    assert [b.state for b in batch] == [GRANTED, GRANTED, GRANTED, WAITING] and queue.running == 3


async def test_no_reserve_over_a_team_alone_and_no_higher_class_idle() -> None:
    """A team alone (nobody else active in its class or above) takes every slot: the reserve keeps
    slots only for someone who came lately."""
    queue, _ = reserved(capacity=3, slots=2)
    assert queue.take(ticket("etl", 1))  # a lower class active does not count
    waiters = [queue.join(ticket("noisy", 0, rid=f"n{i}")) for i in range(3)]
    assert [w.state for w in waiters] == [GRANTED, GRANTED, WAITING]
    assert queue.running == 3


reserve_ops = st.lists(st.one_of(ARRIVE, SERVE, WAIT), max_size=120)


@settings(max_examples=300, deadline=None)
@given(ops=reserve_ops, capacity=st.integers(1, 4), slots=st.integers(1, 3))
async def test_the_reserve_never_idles_a_slot_while_another_team_or_class_waits(
    ops: list[Op], capacity: int, slots: int
) -> None:
    """Whatever the arrivals, services and pauses: a free slot with someone waiting means every waiter
    is of one team and class, the free slots are among the last ``reserve`` (at most all but one), and
    someone else was active within the window; nobody is served twice or lost. (Once the window
    passes, a slot held back goes at the next arrival or release: a release is always to come.)"""
    queue, tick = reserved(capacity, slots, window=1.0)
    waiters: list[Waiter] = []
    running: list[Waiter | None] = []
    for kind, team, rank in ops:
        if kind == "arrive":
            t = ticket(team, rank, rid=f"{team}{len(waiters)}")
            if queue.take(t):
                running.append(None)
            else:
                waiters.append(queue.join(t))
        elif kind == "serve" and running:
            running.pop(0)
            queue.release()
        elif kind == "wait":
            tick.now += 0.6
        running += [w for w in waiters if w.state == GRANTED]
        waiters = [w for w in waiters if w.state == WAITING]
        assert len(running) == queue.running and len(waiters) == queue.waiting
        if waiters and queue.running < capacity and kind != "wait":  # a held slot is given at the next event
            assert len({(w.ticket.team, w.ticket.rank) for w in waiters}) == 1
            assert capacity - queue.running <= min(slots, capacity - 1)
            head = waiters[0].ticket
            assert queue.reserve.holds(head.rank, head.team, capacity - queue.running, queue.waiting, capacity)


async def test_backlogged_teams_share_by_weight_with_a_reserve() -> None:
    """Both teams always waiting: the reserve holds nothing back, and the split is the weights'."""
    queue, _ = reserved(capacity=4, slots=2, classes=1)
    for _ in range(4):
        assert queue.take()
    waiters = [queue.join(ticket(t, 0, w, rid=f"{t}{i}")) for i in range(300) for t, w in (("a", 3.0), ("b", 1.0))]
    order: list[Waiter] = []
    for _ in range(200):
        queue.release()
        order += [w for w in waiters if w.state == GRANTED and w not in order]
        assert queue.running == 4
    share = Counter(w.ticket.team for w in order)
    assert share["a"] == 150 and share["b"] == 50


def test_the_reserve_is_read_from_the_config_and_kept_below_the_capacity() -> None:
    model = {"name": "m", "targets": [{"provider": "mock"}]}
    cfg = parse_config({"models": [{**model, "queue": {"capacity": 4, "reserve": 1, "reserve_window": 0.5}}]})
    settings = fair_policy(cfg).queues["m"]
    assert (settings.reserve, settings.reserve_window) == (1, 0.5)
    assert fair_policy(parse_config({"models": [{**model, "queue": {"capacity": 4}}]})).queues["m"].reserve == 0
    with pytest.raises(ConfigError, match=r"queue: reserve: must be below capacity"):
        parse_config({"models": [{**model, "queue": {"capacity": 2, "reserve": 2}}]})
    with pytest.raises(ConfigError, match=r"queue.reserve_window"):
        parse_config({"models": [{**model, "queue": {"capacity": 2, "reserve_window": 0}}]})

"""The in-process fair queue (``gateway.limits.fairq``): WFQ order against SCFQ's fairness bound and
strict priority (Hypothesis), shedding (bound, eviction order, deadline, Retry-After), a client gone
while queued, the pool down, and no slot leaked whatever clients do. Its reserve is
``test_fairq_reserve``'s; classes and learned capacity (``fairq_policy``) are ``test_fairq_policy``'s."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.core.errors import NoHealthyTarget, RateLimited
from gateway.limits.fairq import (
    GRANTED,
    WAITING,
    LocalQueue,
    ModelQueue,
    QueueSettings,
    Slot,
    Ticket,
    Waiter,
    credit,
)
from tests.support.clock import VirtualClock
from tests.support.waiting import eventually, turn
from tests.unit.fair_tickets import ARRIVE, SERVE, TEAMS, Op, ticket


def up() -> None:
    return None


# --- the order --------------------------------------------------------------------------------------

ops = st.lists(st.one_of(ARRIVE, SERVE), max_size=120)


# a credit banked before a stretch and spent inside it: gap 2.0, over the credit-less bound of 1.5
BANKED: list[Op] = [
    ("arrive", "b", 0), ("serve", "", 0), ("arrive", "a", 0), ("arrive", "a", 0), ("arrive", "b", 0),
    ("serve", "", 0), ("arrive", "a", 0), ("arrive", "a", 0), ("serve", "", 0), ("serve", "", 0),
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(ops=ops, weights=st.tuples(*[st.integers(1, 4) for _ in TEAMS]))
@example(ops=BANKED, weights=(1, 2, 1))
async def test_service_follows_strict_priority_and_the_wfq_fairness_bound(
    ops: list[Op], weights: tuple[int, ...]
) -> None:
    """At each serve, the served class is the highest waiting; within a class, over any stretch where
    two teams both stay backlogged, their service divided by weight differs by at most
    1/w_i + 1/w_j (self-clocked fair queuing's bound) plus the credit a team below its share may have
    banked before the stretch (``fairq.credit``); nobody is served twice or lost."""
    weight = dict(zip(TEAMS, weights, strict=True))
    queue = LocalQueue(capacity=1, max_waiting=10_000, classes=2)
    assert queue.take()  # the one slot is busy: every arrival waits
    waiters: list[Waiter] = []
    waiting: list[Counter[str]] = [Counter(), Counter()]
    served: list[Counter[str]] = [Counter(), Counter()]
    since: dict[tuple[int, str, str], Counter[str]] = {}  # both backlogged since: service then
    for kind, team, rank in ops:
        if kind == "arrive":
            waiters.append(queue.join(ticket(team, rank, weight[team])))
            waiting[rank][team] += 1
            continue
        highest = next((r for r in (0, 1) if sum(waiting[r].values())), None)
        queue.release()
        now = [w for w in waiters if w.state == GRANTED]
        if highest is None:
            assert not now and queue.running == 0
            assert queue.take()
            continue
        assert len(now) == 1 and queue.running == 1
        who = now[0]
        waiters.remove(who)
        who.state = "served"
        r, team_served = who.ticket.rank, who.ticket.team
        assert r == highest, "a lower class was served while a higher one waited"
        waiting[r][team_served] -= 1
        served[r][team_served] += 1
        check_bound(waiting, served, since, weight)
    assert sum(sum(c.values()) for c in waiting) == queue.waiting


def check_bound(
    waiting: list[Counter[str]],
    served: list[Counter[str]],
    since: dict[tuple[int, str, str], Counter[str]],
    weight: dict[str, int],
) -> None:
    for r in (0, 1):
        for i in TEAMS:
            for j in TEAMS:
                if i >= j:
                    continue
                key = (r, i, j)
                if not (waiting[r][i] and waiting[r][j]):
                    since.pop(key, None)
                    continue
                base = since.setdefault(key, served[r].copy())
                si, sj = served[r][i] - base[i], served[r][j] - base[j]
                gap = abs(si / weight[i] - sj / weight[j])
                assert gap <= 1 / weight[i] + 1 / weight[j] + credit(1) + 1e-9, (r, i, j, si, sj)


@settings(max_examples=200, deadline=None)
@given(ops=ops, weights=st.tuples(*[st.integers(1, 4) for _ in TEAMS]), rank=st.integers(0, 1))
async def test_a_newcomer_from_an_idle_team_is_served_next_in_its_class(
    ops: list[Op], weights: tuple[int, ...], rank: int
) -> None:
    """Whatever came before, a team's first request goes before every backlogged team's next one in
    its class (one slot's turnover), behind only those that started at the same virtual time and
    came first: earlier arrivals from teams as idle as it was."""
    weight = dict(zip(TEAMS, weights, strict=True))
    queue = LocalQueue(capacity=1, max_waiting=10_000, classes=2)
    assert queue.take()
    waiters: list[Waiter] = []
    for kind, team, r in ops:
        if kind == "arrive":
            waiters.append(queue.join(ticket(team, r, weight[team], rid=f"{team}{len(waiters)}")))
            continue
        queue.release()
        if not any(w.state == GRANTED for w in waiters):
            assert queue.take()
        waiters = [w for w in waiters if w.state != GRANTED]
    newcomer = queue.join(ticket("new", rank, 2.0))
    same = [w for w in waiters if w.state == "waiting" and w.ticket.rank == rank]
    before = [w for w in same if w.tag == newcomer.tag]  # started at the same virtual time, earlier
    higher = sum(1 for w in waiters if w.state == "waiting" and w.ticket.rank < rank)
    for _ in range(higher + len(before)):
        queue.release()
    queue.release()
    assert newcomer.state == GRANTED
    assert all(w.state == GRANTED for w in before)
    assert all(w.state == "waiting" for w in same if w not in before)


async def test_a_quiet_teams_request_goes_before_a_noisy_backlog() -> None:
    queue = LocalQueue(capacity=1, max_waiting=10_000, classes=1)
    assert queue.take()
    noisy = [queue.join(ticket("noisy", rid=f"n{i}")) for i in range(8)]
    queue.release()
    assert noisy[0].state == GRANTED
    for i in range(1, 4):  # a quiet request now and then, behind a noisy backlog
        quiet = queue.join(ticket("quiet", rid=f"q{i}"))
        queue.release()
        assert quiet.state == GRANTED, i  # the next slot: not a place behind the noisy head
        queue.release()
        assert noisy[i].state == GRANTED


@pytest.mark.parametrize("served_before", [4, 100])
async def test_a_quiet_burst_up_to_three_times_the_slots_goes_before_a_noisy_backlog(served_before: int) -> None:
    """Four slots busy with a noisy backlog's requests: a quiet team's burst of thirteen goes on the
    next twelve releases, the thirteenth after the backlog's head, however long the backlog has been
    served. The virtual time is the lowest start of the last four served (SFQ's start in service), and
    a team below its share starts up to twice the slots (eight) before it: the credit it banks, and no
    more. A Poisson team at a third of its share bursts past the slots alone often enough to set its
    TTFT p99 (benchmarks/results/fair-fairq4.md)."""
    queue = LocalQueue(capacity=4, max_waiting=10_000, classes=1)
    for _ in range(4):
        assert queue.take()
    noisy = [queue.join(ticket("noisy", rid=f"n{i}")) for i in range(served_before + 8)]
    for _ in range(served_before):
        queue.release()
    head = noisy[served_before]
    assert [n.state for n in noisy[served_before - 4 : served_before + 1]] == [GRANTED] * 4 + [WAITING]
    quiet = [queue.join(ticket("quiet", rid=f"q{i}")) for i in range(13)]
    for _ in range(12):
        queue.release()
    assert [q.state for q in quiet] == [GRANTED] * 12 + [WAITING]
    assert head.state == WAITING
    queue.release()
    assert head.state == GRANTED and quiet[12].state == WAITING
    queue.release()
    assert quiet[12].state == GRANTED


async def test_backlogged_teams_share_by_weight() -> None:
    queue = LocalQueue(capacity=1, max_waiting=10_000, classes=1)
    assert queue.take()
    waiters = [queue.join(ticket(t, 0, w)) for _ in range(300) for t, w in (("a", 3.0), ("b", 1.0))]
    order = []
    for _ in range(200):
        queue.release()
        order.append(next(w for w in waiters if w.state == GRANTED and w not in order))
    share = Counter(w.ticket.team for w in order)
    assert share["a"] == 150 and share["b"] == 50


# --- the queue as requests see it --------------------------------------------------------------------


def model_queue(capacity: int = 1, max_waiting: int = 4, timeout: float = 30.0) -> ModelQueue:
    return ModelQueue("m", QueueSettings(capacity, max_waiting, timeout), classes=3)


async def test_a_free_slot_is_taken_without_waiting_and_given_back_once() -> None:
    q = model_queue(capacity=2)
    one, two = await q.enter(ticket("a"), up), await q.enter(ticket("a"), up)
    assert q.local.running == 2
    one.release()
    one.release()
    assert q.local.running == 1
    two.release()
    assert q.local.running == 0


async def test_a_freed_slot_goes_to_the_higher_class_then_by_turn(clock: VirtualClock) -> None:
    q = model_queue(capacity=1, max_waiting=10)
    held = await q.enter(ticket("a"), up)
    order: list[str] = []

    async def request(t: Ticket) -> None:
        slot = await q.enter(t, up)
        order.append(t.rid)
        await clock.advance(1)
        slot.release()

    tasks = [asyncio.create_task(request(ticket("b", 1, rid=f"batch{i}"))) for i in range(2)]
    await turn()
    tasks.append(asyncio.create_task(request(ticket("c", 0, rid="interactive"))))
    await turn()
    held.release()
    await asyncio.gather(*tasks)
    assert order == ["interactive", "batch0", "batch1"]


async def test_a_full_queue_evicts_the_newest_lowest_class_waiter_before_refusing_a_higher_one(
    clock: VirtualClock,
) -> None:
    q = model_queue(capacity=1, max_waiting=3)
    held = await q.enter(ticket("a"), up)
    waits = {
        rid: asyncio.create_task(q.enter(ticket(team, rank, rid=rid), up))
        for rid, team, rank in (("b1", "b", 1), ("bulk1", "c", 2), ("bulk2", "c", 2))
    }
    await turn()
    newcomer = asyncio.create_task(q.enter(ticket("a", 0, rid="i1"), up))
    await turn()
    with pytest.raises(RateLimited) as shed:
        await waits["bulk2"]
    assert shed.value.headers["X-Gateway-Queue"] == "shed-evicted"
    assert shed.value.retry_after is not None and shed.value.retry_after >= 1
    # full again, and nothing below the lowest class: the newcomer of that class is refused
    with pytest.raises(RateLimited) as full:
        await q.enter(ticket("c", 2, rid="bulk3"), up)
    assert full.value.headers["X-Gateway-Queue"] == "shed-full"
    assert not waits["bulk1"].done()
    held.release()
    slot = await newcomer  # the interactive one goes first
    slot.release()
    for rid in ("b1", "bulk1"):
        (await waits[rid]).release()
    assert q.local.running == 0 and q.local.waiting == 0
    assert q.gauges.shed == {("bulk", "c", "evicted"): 1, ("bulk", "c", "full"): 1}


async def test_a_wait_past_its_deadline_is_shed_with_retry_after_from_the_drain_rate(clock: VirtualClock) -> None:
    q = model_queue(capacity=2, max_waiting=10, timeout=5.0)
    for _ in range(4):  # slots held 4 s each: the queue drains 2 / 4 s
        slot = await q.enter(ticket("a"), up)
        await clock.advance(4)
        slot.release()
    for _ in range(100):
        q.drain.held(4.0)
    held = [await q.enter(ticket("a"), up) for _ in range(2)]
    ahead = [asyncio.create_task(q.enter(ticket("a", rid=f"w{i}"), up)) for i in range(3)]
    await turn()
    began = clock.now
    with pytest.raises(RateLimited) as shed:
        await q.enter(ticket("b", deadline=clock.now + 2.0), up)  # its own deadline is sooner than 5 s
    assert clock.now - began == pytest.approx(2.0, abs=0.01)
    assert shed.value.headers["X-Gateway-Queue"] == "shed-timeout"
    assert shed.value.retry_after == 8.0  # 3 ahead + itself, at 2 slots per 4 s
    for task in ahead:
        with pytest.raises(RateLimited):
            await task  # the queue's own timeout
    for slot in held:
        slot.release()
    assert q.local.running == 0 and q.local.waiting == 0


async def test_a_client_gone_while_queued_leaves_at_once_and_leaks_no_slot(clock: VirtualClock) -> None:
    q = model_queue(capacity=1, max_waiting=10)
    held = await q.enter(ticket("a"), up)
    gone = asyncio.create_task(q.enter(ticket("b"), up))
    after = asyncio.create_task(q.enter(ticket("c"), up))
    await turn()
    assert q.local.waiting == 2
    gone.cancel()
    await eventually(lambda: q.local.waiting == 1, "the cancelled waiter out of the queue")
    held.release()
    (await after).release()
    assert q.local.running == 0


async def test_a_client_gone_as_its_slot_was_granted_gives_the_slot_to_the_next() -> None:
    q = model_queue(capacity=1, max_waiting=10)
    held = await q.enter(ticket("a"), up)
    gone = asyncio.create_task(q.enter(ticket("b"), up))
    after = asyncio.create_task(q.enter(ticket("c"), up))
    await turn()
    held.release()  # granted to "b" ...
    gone.cancel()  # ... whose client went before its task ran again
    (outcome,) = await asyncio.gather(gone, return_exceptions=True)
    if isinstance(outcome, Slot):  # asyncio let the grant win the race: its holder gives it back
        outcome.release()
    else:
        assert isinstance(outcome, asyncio.CancelledError)
    (await after).release()
    assert q.local.running == 0 and q.local.waiting == 0


async def test_the_pool_down_is_its_503_at_arrival_and_at_the_end_of_a_wait(clock: VirtualClock) -> None:
    q = model_queue(capacity=1, max_waiting=10, timeout=1.0)
    held = await q.enter(ticket("a"), up)
    state = {"down": False}

    def down() -> NoHealthyTarget | None:
        return NoHealthyTarget("every target is cooling down") if state["down"] else None

    waiting = asyncio.create_task(q.enter(ticket("b"), down))
    await turn()
    state["down"] = True
    with pytest.raises(NoHealthyTarget):
        await waiting
    with pytest.raises(NoHealthyTarget):
        await q.enter(ticket("b"), down)
    held.release()
    assert q.gauges.shed == {("interactive", "b", "down"): 2}


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["enter", "cancel", "release"]), st.integers(0, 9)), max_size=60),
    capacity=st.integers(1, 3),
)
async def test_no_slot_is_leaked_or_doubled_whatever_clients_do(ops: list[tuple[str, int]], capacity: int) -> None:
    """Requests enter, clients go while queued (or as their slot is granted), answers end: the
    slots in use are always exactly those held, never above capacity, and every slot comes back."""
    q = model_queue(capacity=capacity, max_waiting=100)
    pending: list[asyncio.Task[Slot]] = []
    held: list[Slot] = []
    for op, pick in ops:
        if op == "enter":
            pending.append(asyncio.create_task(q.enter(ticket("abc"[pick % 3], pick % 2), up)))
        elif op == "cancel" and pending:
            pending.pop(pick % len(pending)).cancel()
        elif op == "release" and held:
            held.pop(pick % len(held)).release()

        def settled() -> bool:  # a slot granted reaches its request within a few turns of the loop
            granted = sum(1 for t in pending if t.done() and not t.cancelled())
            return q.local.running == len(held) + granted

        await eventually(settled, "the slots in use are those held")
        for task in [t for t in pending if t.done()]:
            pending.remove(task)
            if not task.cancelled():
                held.append(task.result())
        assert q.local.running == len(held) <= capacity
    for task in pending:
        task.cancel()
    for outcome in await asyncio.gather(*pending, return_exceptions=True):
        if isinstance(outcome, Slot):
            held.append(outcome)
    for slot in held:
        slot.release()
    await eventually(lambda: q.local.running == 0 and q.local.waiting == 0, "every slot back, nobody waiting")

"""The fair-sharing benchmark's own pieces cannot lie: its scripted pool serves at most its capacity at
once, in arrival order, and lets a hung-up waiter go; its arrivals, percentiles and bounds are the
arithmetic the verdicts claim."""

from __future__ import annotations

import asyncio
import math
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import fair_load as fl
from benchmarks import fair_sim, fair_trace
from benchmarks.fair import GATEWAYS, SCENARIOS, PoolInfo, gateway_config, verdicts
from benchmarks.fair_pool import POOL, Slots, make_app
from gateway.limits.fairq_policy import fair_policy
from gateway.runtime.config import parse_config
from tests.support.waiting import eventually


async def test_slots_cap_concurrency_and_serve_in_arrival_order() -> None:
    slots = Slots(2)
    order: list[int] = []
    hold = asyncio.Event()

    async def user(i: int) -> None:
        await slots.acquire()
        order.append(i)
        await hold.wait()
        slots.release()

    tasks = [asyncio.create_task(user(i)) for i in range(6)]
    await eventually(lambda: slots.waiting == 4, "four waiting")
    assert (slots.running, order) == (2, [0, 1])
    hold.set()
    await asyncio.gather(*tasks)
    assert (slots.peak, slots.peak_waiting, order) == (2, 4, [0, 1, 2, 3, 4, 5])


async def test_a_cancelled_waiter_leaves_the_queue_and_its_slot_goes_on() -> None:
    slots = Slots(1)
    await slots.acquire()
    gone = asyncio.create_task(slots.acquire())
    stays = asyncio.create_task(slots.acquire())
    await eventually(lambda: slots.waiting == 2, "two waiting")
    gone.cancel()
    await eventually(lambda: slots.waiting == 1, "the cancelled one gone")
    slots.release()
    await stays
    assert (slots.running, slots.waiting) == (1, 0)


async def stream(session: aiohttp.ClientSession, url: str, team: str) -> int:
    body = {"model": "tiny", "prompt": f"team={team} hi", "max_tokens": 3, "stream": True}
    async with session.post(url, json=body) as resp:
        assert resp.status == 200
        events = [line async for line in resp.content if line.startswith(b"data: {")]
    return len(events)


async def test_the_pool_over_http_never_serves_more_than_its_capacity() -> None:
    app = make_app(capacity=3, tokens=3, gap_ms=5, prefill_ms=5)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        url = str(server.make_url("/v1/completions"))
        got = await asyncio.gather(*(stream(session, url, "t1" if i % 2 else "t2") for i in range(12)))
        async with session.get(server.make_url("/bench/stats")) as resp:
            stats = await resp.json()
        async with session.get(server.make_url("/metrics")) as resp:
            metrics = await resp.text()
    assert got == [3] * 12
    assert stats["peak_running"] == 3 and stats["peak_waiting"] >= 1
    assert stats["served"] == {"t1": 6, "t2": 6}
    assert 'vllm:num_requests_running{model_name="tiny"} 0' in metrics
    assert app[POOL].slots.running == 0


@given(st.floats(0.1, 100), st.floats(1, 60), st.integers(0, 2**31))
def test_poisson_arrivals_are_seeded_ordered_and_inside_the_window(rate: float, seconds: float, seed: int) -> None:
    got = fl.arrivals(rate, seconds, seed)
    assert got == fl.arrivals(rate, seconds, seed)
    assert got == sorted(got) and all(0 < t < seconds for t in got)


def test_arrival_counts_follow_the_rate() -> None:
    n = len(fl.arrivals(50.0, 200.0, 7))
    assert abs(n - 10_000) < 4 * math.sqrt(10_000)  # four standard deviations of a Poisson count


def outcome(team: str, status: int | str, ttft: float | None, due: float = 10.0) -> fl.Outcome:
    return fl.Outcome(team=team, due=due, status=status, ttft=ttft, end=due + 1 if status == 200 else None)


def test_a_given_up_request_is_an_infinite_ttft_and_a_shed_one_no_sample() -> None:
    window = [outcome("q", 200, 0.01 * i) for i in range(1, 99)]
    window += [outcome("q", "timeout", None), outcome("q", 429, None)]
    ordered = fl.ttfts(window)
    assert len(ordered) == 99 and ordered[-1] == math.inf
    assert fl.pct(ordered, 99) == math.inf  # 99 samples: the 99th is the lost one
    assert fl.pct(ordered, 50) == pytest.approx(0.50)
    assert (fl.shed(window), fl.failed(window)) == (1, 1)


def test_the_bound_is_idle_p99_plus_one_slots_turnover() -> None:
    assert fl.turnover_s(0.4, 4) == pytest.approx(0.1)
    assert fl.ttft_bound(0.05, 0.4, 4) == pytest.approx(0.15)


@pytest.mark.parametrize(
    ("counts", "error"),
    [({"a": 200, "b": 100}, 0.0), ({"a": 150, "b": 150}, 0.5), ({"a": 220, "b": 80}, 0.2), ({"a": 0, "b": 10}, 2.0)],
)
def test_the_split_error_is_the_worst_teams_relative_miss(counts: dict[str, int], error: float) -> None:
    assert fl.split_error(counts, {"a": 2, "b": 1}) == pytest.approx(error, abs=1e-9)


def team(p99: float | None, shed: int = 0, failed: int = 0, done: int = 0) -> dict[str, object]:
    return {"ttft_p99_s": p99, "shed": shed, "failed": failed, "completed_in_window": done}


def test_verdicts_pass_only_inside_every_bound() -> None:
    scenarios = {
        "idle": {"teams": {"quiet": team(0.05)}},
        "a": {"teams": {"quiet": team(0.149), "noisy": team(9.0, shed=50)}},
        "b": {"teams": {"heavy": team(1, done=190), "light": team(1, done=100)}},
        "c": {"teams": {"interactive": team(0.151), "batch": team(5, shed=10)}},
    }
    v = verdicts({"scenarios": scenarios}, service_s=0.4, capacity=4)
    assert v["bound_s"] == pytest.approx(0.15)
    assert (v["a"]["pass"], v["b"]["pass"], v["c"]["pass"]) == (True, True, False)  # c: 151 ms > 150 ms
    scenarios["a"]["teams"]["quiet"] = team(0.1, shed=1)  # never shed, however fast
    scenarios["c"]["teams"] = {"interactive": team(0.1), "batch": team(5, shed=0)}  # batch must be shed
    scenarios["b"]["teams"]["heavy"] = team(1, done=250)
    v = verdicts({"scenarios": scenarios}, service_s=0.4, capacity=4)
    assert (v["a"]["pass"], v["b"]["pass"], v["c"]["pass"]) == (False, False, False)


async def test_the_client_sees_the_pools_queue_in_ttft_and_gives_up_at_its_deadline() -> None:
    app = make_app(capacity=1, tokens=3, gap_ms=30, prefill_ms=10)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        url = str(server.make_url("/v1/completions"))
        team = fl.Team("t", "k", 1.0, 0)
        body = {"model": "tiny", "prompt": "team=t hi", "max_tokens": 3, "stream": True}
        first, second, late = (fl.Outcome("t", 0.0) for _ in range(3))
        t0 = time.perf_counter()
        served = [asyncio.create_task(fl.one(session, url, team, body, o, t0, 30)) for o in (first, second)]
        slots = app[POOL].slots
        await eventually(lambda: (slots.running, slots.waiting) == (1, 1), "one served, one queued")
        await fl.one(session, url, team, body, late, time.perf_counter(), 0.05)  # behind 70 ms at least
        await asyncio.gather(*served)
        await eventually(lambda: app[POOL].aborted["t"] == 1, "the given-up request left the pool's queue")
    done = sorted([first, second], key=lambda o: o.ttft or math.inf)
    assert [o.status for o in done] == [200, 200] and [o.tokens for o in done] == [3, 3]
    assert done[1].ttft is not None and done[1].ttft >= 0.07 + 0.01  # the first answer, then its own prefill
    assert (late.status, late.ttft) == ("timeout", None)


@pytest.mark.parametrize("capacity", [1, 4, 5])
def test_with_redis_out_the_gateways_shares_add_up_to_the_pools_capacity(capacity: int) -> None:
    """Each gateway's Redis-out share is ceil(capacity / limits.replicas): the benchmark's gateways
    say how many they are, or each would serve the whole capacity on its own."""
    pool = PoolInfo("http://127.0.0.1:1", "scripted", capacity, 16, {})
    config = gateway_config(pool, 1, "redis://127.0.0.1:6379/0", "with", SCENARIOS["a"])
    queue = fair_policy(parse_config(config)).queues["tiny"]
    assert queue.share == math.ceil(capacity / GATEWAYS)
    assert GATEWAYS * queue.share < capacity + GATEWAYS


def test_request_lengths_are_the_mean_or_spread_uniformly_around_it() -> None:
    same = fl.Lengths(16).draws()
    assert {next(same) for _ in range(50)} == {16}
    spread = fl.Lengths(16, 0.5, seed=3).draws()
    drawn = [next(spread) for _ in range(4000)]
    assert min(drawn) == 8 and max(drawn) == 24
    assert abs(sum(drawn) / len(drawn) - 16) < 0.3


async def test_the_pool_logs_each_numbered_request_in_order_of_its_times() -> None:
    app = make_app(capacity=1, tokens=2, gap_ms=1, prefill_ms=1)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        url = str(server.make_url("/v1/completions"))
        for prompt in ("team=t hi #7", "team=t hi"):  # the second names no number: not logged
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 2, "stream": True}
            async with session.post(url, json=body) as resp:
                await resp.read()
    ((serial, team, *times),) = app[POOL].log
    assert (serial, team) == (7, "t")
    assert times == sorted(times) and times[0] > 0


def test_the_trace_splits_a_ttft_into_its_parts_and_counts_who_passed() -> None:
    """A quiet request due at 1.0 reaches the pool at 1.3: a slot had come free at 1.2 (a noisy
    request's end) and went to a noisy request that reached the pool at 1.25, after it was due."""

    def rec(team: str, due: float, pool: list[float], ttft: float | None = None) -> dict[str, object]:
        return {"team": team, "due": due, "ttft": ttft, "pool": pool}

    records = [
        rec("quiet", 1.0, [1.3, 1.3, 1.35, 1.8], ttft=0.36),
        rec("noisy", 0.1, [0.5, 0.5, 0.55, 1.2]),
        rec("noisy", 0.2, [1.25, 1.25, 1.3, 1.9]),
        rec("quiet", 0.2, [0.3, 0.3, 0.35, 0.6], ttft=0.2),  # before the warm-up's end: left out
    ]
    (row,) = fair_trace.breakdown(records, "quiet", warmup=0.5)
    want = {"ttft": 0.36, "gateway": 0.3, "next free": 0.2, "after free": 0.1}
    want |= {"pool queue": 0.0, "prefill": 0.05, "relay": 0.01, "passed": 1.0}
    assert row == pytest.approx(want)


def test_the_simulated_floor_orders_the_policies_as_the_docs_say() -> None:
    """``benchmarks.fair_sim``: more credit never lengthens the quiet team's p99 wait, unlimited credit
    is strict priority, and headroom shortens it only by taking slots from the noisy team."""
    pool = fair_sim.Pool()

    def run(policy: fair_sim.Policy) -> tuple[float, float]:
        waits, noisy = fair_sim.simulate(policy, pool, 400.0, seed=1)
        return waits[int(0.99 * len(waits))], noisy

    none, cap, twice, first = (run(fair_sim.Policy("", c)) for c in (0.0, 4.0, 8.0, None))
    headroom = run(fair_sim.Policy("", None, 1, 1.0))
    assert none[0] > cap[0] >= twice[0] >= first[0]
    assert none[1] == cap[1] == twice[1] == first[1]  # work-conserving: the same noisy throughput
    assert headroom[0] < first[0] and headroom[1] < 0.9 * first[1]


def test_on_a_wider_pool_no_work_conserving_order_keeps_within_one_turnover() -> None:
    """``benchmarks.fair_sim --capacity 16``: with slots freeing at random, strict priority still has the
    quiet team wait several turnovers at p99 (its requests arrive together); only a reserve of most
    of the slots gets within one turnover, and it does so by idling them: the noisy team loses half."""
    pool = fair_sim.Pool(capacity=16, service=0.408, spread=0.5, rate=0.3 * 16 / 0.408)
    turnover = pool.service / pool.capacity

    def run(policy: fair_sim.Policy) -> tuple[float, float]:
        waits, noisy = fair_sim.simulate(policy, pool, 300.0, seed=1)
        return fair_sim.quantile(waits, 0.99), noisy

    first = run(fair_sim.Policy("", None))
    half = run(fair_sim.Policy("", None, 8, 1.0, "guarantee"))
    most = run(fair_sim.Policy("", None, 12, 1.0, "guarantee"))
    assert first[0] > 3 * turnover and half[0] > 2 * turnover
    assert most[0] < turnover and most[1] < 0.5 * first[1]
    assert [p.name for p in fair_sim.scaled(16)][-1] == "reserve 12, guarantee, active 1 s"

"""What any queue in front of a full pool can give a quiet team, simulated (no gateway, no clock): the
floor under ``scripts/bench-fair``'s scenario a (issue 41).

A pool of ``--capacity`` slots, each request holding one for the mean service time ±``--spread``
(uniform); a noisy team always has requests waiting; a quiet team's arrive as a Poisson process at
``--rate``. Each policy decides who gets a freed slot:

* ``sfq``: start-time fair queuing as ``gateway.limits.fairq`` does it (virtual time: the lowest start of
  the last ``capacity`` served), with ``credit`` (the start may be that far before the virtual time);
* ``priority``: the quiet team's waiting requests first (what unlimited credit gives);
* ``headroom``: quiet first, and the noisy team is not given the last ``r`` free slots while the quiet
  team sent a request within ``active`` seconds (a queue that is not work-conserving).

    python -m benchmarks.fair_sim [--seconds 2000] [--seeds 4] [--capacity 4] [--spread 0.5]

prints, per policy, the quiet team's p99 wait for a slot per seed and the noisy team's throughput.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    name: str
    credit: float | None = 0.0  # sfq's credit; None: quiet first (priority)
    reserve: int = 0  # headroom: slots kept from the noisy team while the quiet team is active
    active: float = 1.0  # headroom: seconds since the quiet team's last arrival that count as active
    mode: str = "free"  # headroom's test: "free" (fairq4's), "share" or "guarantee" (see ``held_back``)
    gaps: float = 0.0  # when > 0: ``active`` is this many of the quiet team's mean gaps, as observed
    noisy: bool = True  # False: the quiet team alone (an idle pool: the bound's base)


@dataclass(frozen=True)
class Pool:
    capacity: int = 4
    service: float = 0.407  # mean seconds a request holds a slot
    spread: float = 0.5
    rate: float = 2.95  # the quiet team's arrivals per second (0.3x of 4 / 0.407)


def simulate(policy: Policy, pool: Pool, seconds: float, seed: int) -> tuple[list[float], float]:
    """The quiet team's waits (seconds, sorted) and the noisy team's completions per second."""
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = rng.expovariate(pool.rate)
    while t < seconds:
        arrivals.append(t)
        t += rng.expovariate(pool.rate)
    running: list[tuple[float, str]] = []  # (end, team)
    waiting: list[tuple[float, float]] = []  # the quiet team's (start tag, arrival), in arrival order
    starts: list[float] = []  # sfq: the starts last served
    last = {"quiet": -float("inf"), "noisy": 0.0}  # sfq: each team's last finish
    waits: list[float] = []
    noisy = 0
    now, seen, last_quiet = 0.0, 0, -float("inf")
    gap = [1.0 / pool.rate]  # the quiet team's mean gap between arrivals, as observed (moving mean)

    def virtual() -> float:
        return min(starts) if starts else 0.0

    def grant() -> None:
        while len(running) < pool.capacity:
            noisy_tag = max(virtual(), last["noisy"])
            quiet_first = waiting and (policy.credit is None or waiting[0][0] < noisy_tag)  # ties: noisy came first
            if quiet_first:
                tag, arrived = waiting.pop(0)
                waits.append(now - arrived)
                team = "quiet"
            else:
                if not policy.noisy:
                    return
                quiet_running = sum(1 for _, t in running if t == "quiet")
                if held_back(policy, pool, len(running), quiet_running, now - last_quiet, gap[0]):
                    return
                tag, team = noisy_tag, "noisy"
                last["noisy"] = noisy_tag + 1.0
            starts.append(tag)
            del starts[: -pool.capacity]
            service = pool.service * rng.uniform(1 - pool.spread, 1 + pool.spread)
            heapq.heappush(running, (now + service, team))

    grant()
    while True:
        if seen < len(arrivals) and (not running or arrivals[seen] < running[0][0]):
            if last_quiet > -float("inf"):
                gap[0] += 0.1 * (arrivals[seen] - last_quiet - gap[0])
            now, last_quiet = arrivals[seen], arrivals[seen]
            seen += 1
            credit = policy.credit if policy.credit is not None else 0.0
            tag = max(virtual() - credit, last["quiet"])
            last["quiet"] = tag + 1.0
            waiting.append((tag, now))
        else:
            if not running:
                break
            now, team = heapq.heappop(running)
            if now > seconds:
                break
            noisy += team == "noisy"
        grant()
    return sorted(waits), noisy / seconds


def held_back(policy: Policy, pool: Pool, busy: int, quiet: int, since: float, gap: float) -> bool:
    """Whether the noisy team is kept from the free slot while the quiet team was active ``since`` ago:
    ``free``, it is among the last ``reserve`` free; ``share``, that and the noisy team would hold more
    than half the slots; ``guarantee``, the free slots left and the quiet team's own would be fewer than
    ``reserve`` (the reserve counts the slots the quiet team already holds)."""
    window = policy.gaps * gap if policy.gaps else policy.active
    if not policy.reserve or since >= window:
        return False
    free = pool.capacity - busy
    if policy.mode == "guarantee":
        return free - 1 + quiet < policy.reserve
    if policy.mode == "share" and busy - quiet + 1 <= pool.capacity / 2:
        return False
    return free <= policy.reserve


POLICIES = (
    Policy("idle pool (the quiet team alone)", None, noisy=False),
    Policy("sfq, no credit", 0.0),
    Policy("sfq, credit = capacity", 4.0),
    Policy("sfq, credit = 2 x capacity (the gateway's)", 8.0),
    Policy("priority (unlimited credit)", None),
    Policy("headroom 1 slot, active 1 s", None, 1, 1.0),
    Policy("headroom 1 slot, active 0.35 s", None, 1, 0.35),
    Policy("reserve 1, guarantee, active 1 s", None, 1, 1.0, "guarantee"),
    Policy("reserve 2, guarantee, active 1 s", None, 2, 1.0, "guarantee"),
    Policy("reserve 2, guarantee, active 0.7 s", None, 2, 0.7, "guarantee"),
    Policy("reserve 2, guarantee, active 0.5 s", None, 2, 0.5, "guarantee"),
    Policy("reserve 2, guarantee, 2 gaps", None, 2, 0.0, "guarantee", 2.0),
    Policy("reserve 2, guarantee, 3 gaps", None, 2, 0.0, "guarantee", 3.0),
    Policy("reserve 1, share, active 1 s", None, 1, 1.0, "share"),
    Policy("reserve 1, free, active 0.7 s", None, 1, 0.7),
    Policy("reserve 1, free, active 0.5 s", None, 1, 0.5),
    Policy("reserve 1, free, 2 gaps", None, 1, 0.0, "free", 2.0),
    Policy("reserve 1, free, active 2 s", None, 1, 2.0),
    Policy("reserve 1, share, active 2 s", None, 1, 2.0, "share"),
    Policy("reserve 1, share, active 3 s", None, 1, 3.0, "share"),
    Policy("reserve 1, share, 6 gaps", None, 1, 0.0, "share", 6.0),
    Policy("reserve 2, share, active 2 s", None, 2, 2.0, "share"),
    Policy("reserve 1, guarantee, active 2 s", None, 1, 2.0, "guarantee"),
)


def scaled(capacity: int) -> tuple[Policy, ...]:
    """The policies for a pool of other than 4 slots: credit in units of the capacity, and the
    guarantee reserve from a quarter of the slots up to most of them (what it takes to keep a quiet
    team's p99 near its idle figure when a slot frees at random: its own concurrency's p99)."""
    reserves = sorted({max(1, capacity * k // 8) for k in (2, 3, 4, 5, 6)})
    return (
        Policy("idle pool (the quiet team alone)", None, noisy=False),
        Policy("sfq, no credit", 0.0),
        Policy("sfq, credit = 2 x capacity (the gateway's)", 2.0 * capacity),
        Policy("priority (unlimited credit)", None),
        *(Policy(f"reserve {r}, guarantee, active 1 s", None, r, 1.0, "guarantee") for r in reserves),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=2000.0)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--spread", type=float, default=0.5)
    p.add_argument("--capacity", type=int, default=4, help="the pool's slots (bench-fair's --capacity)")
    p.add_argument("--service", type=float, default=0.407, help="mean seconds a request holds a slot")
    p.add_argument("--quiet", type=float, default=0.3, help="the quiet team's rate, a multiple of the pool's")
    args = p.parse_args(argv)
    rate = args.quiet * args.capacity / args.service
    pool = Pool(args.capacity, args.service, args.spread, rate)
    print(f"pool: {pool}; turnover {pool.service / pool.capacity * 1000:.0f} ms\n")
    print("| policy | quiet p50 wait per seed (ms) | quiet p99 wait per seed (ms) | noisy completions/s |")
    print("|---|---|---|---:|")
    for policy in POLICIES if args.capacity == 4 else scaled(args.capacity):
        runs = [simulate(policy, pool, args.seconds, seed) for seed in range(1, args.seeds + 1)]
        p50 = ", ".join(f"{quantile(waits, 0.5) * 1000:.0f}" for waits, _ in runs)
        p99 = ", ".join(f"{quantile(waits, 0.99) * 1000:.0f}" for waits, _ in runs)
        noisy = sum(r for _, r in runs) / len(runs)
        print(f"| {policy.name} | {p50} | {p99} | {noisy:.2f} |")
    return 0


def quantile(waits: list[float], q: float) -> float:
    """``waits`` sorted; 0 where the quiet team sent nothing."""
    return waits[int(q * len(waits))] if waits else 0.0


if __name__ == "__main__":
    sys.exit(main())

"""Open-loop streaming load per team for the fair-sharing benchmark (``benchmarks/fair.py``), and the
arithmetic its verdicts rest on.

Each team's requests arrive as a Poisson process at its rate (seeded: the same arrivals on an idle pool
and on a loaded one), round-robin over the gateways, each a streamed completion. A request's times
count from its due time, whatever the client or the gateways were doing (no coordinated omission):
TTFT to its first ``data:`` event, end to its ``[DONE]``. Shed requests (429, 503) keep their status and
``Retry-After``; a request with no first token within ``deadline`` seconds is given up (``timeout``,
the client hangs up; a started answer runs to its end), and counts as an infinite TTFT in the
percentiles, never as a missing sample.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from benchmarks.procs import percentile

SHED = (429, 503)
STREAM_BOUND_S = 120.0  # a started answer's whole stream, after its first token


@dataclass(frozen=True)
class Team:
    name: str
    key: str
    rate: float  # requests per second offered
    seed: int
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    team: str
    due: float  # seconds from the run's start
    status: int | str = "error"  # an HTTP status, "timeout" or "error"
    ttft: float | None = None
    end: float | None = None  # seconds from the run's start
    tokens: int = 0
    retry_after: str | None = None
    gateway: int = 0
    serial: int = 0  # the request's number, last in its prompt (``#N``): the pool's log names it
    origin: float = 0.0  # the wall-clock time (``time.time()``) of the run's start: ``due`` counts from it


def arrivals(rate: float, seconds: float, seed: int) -> list[float]:
    """Due times of a Poisson process at ``rate`` per second over ``[0, seconds)``."""
    rng = random.Random(seed)
    out: list[float] = []
    t = rng.expovariate(rate)
    while t < seconds:
        out.append(t)
        t += rng.expovariate(rate)
    return out


async def one(
    session: aiohttp.ClientSession, url: str, team: Team, body: dict[str, Any], o: Outcome, t0: float, deadline: float
) -> None:
    headers = {"Authorization": f"Bearer {team.key}", **team.headers}
    due = t0 + o.due
    try:
        async with asyncio.timeout(deadline) as bound:
            async with session.post(url, json=body, headers=headers) as resp:
                o.status = resp.status
                o.retry_after = resp.headers.get("Retry-After")
                if resp.status != 200:
                    await resp.read()
                    return
                async for line in resp.content:
                    if line.startswith(b"data: [DONE]"):
                        o.end = time.perf_counter() - t0
                        return
                    if line.startswith(b"data: {") and b'"choices":[]' not in line.replace(b" ", b""):
                        if o.ttft is None:
                            o.ttft = time.perf_counter() - due
                            # the deadline is the first token's: a started answer runs to its end
                            bound.reschedule(asyncio.get_running_loop().time() + STREAM_BOUND_S)
                        o.tokens += 1
                o.status = "error"  # the stream ended without [DONE]
    except TimeoutError:
        o.status = "timeout"
    except (aiohttp.ClientError, OSError):
        o.status = "error"


@dataclass(frozen=True)
class Lengths:
    """Each request's ``max_tokens``: ``mean``, or drawn uniformly within ±``spread`` of it (seeded).
    One length for all makes the pool's slots free in step once they have (nothing spreads them)."""

    mean: int
    spread: float = 0.0
    seed: int = 0

    def draws(self) -> Iterator[int]:
        rng = random.Random(self.seed)
        low, high = round(self.mean * (1 - self.spread)), round(self.mean * (1 + self.spread))
        while True:
            yield rng.randint(max(1, low), max(1, high))


async def drive(
    teams: list[Team],
    gateways: list[str],
    seconds: float,
    deadline: float,
    lengths: Lengths,
    extra: dict[str, Any] | None = None,
) -> list[Outcome]:
    """Every team's arrivals over ``seconds``, round-robin over ``gateways`` (base URLs); returns once
    each request has ended, been refused or given up."""
    plan = sorted(
        ((Outcome(team=t.name, due=d), t) for t in teams for d in arrivals(t.rate, seconds, t.seed)),
        key=lambda p: p[0].due,
    )
    connector = aiohttp.TCPConnector(limit=0)
    tasks: list[asyncio.Task[None]] = []
    drawn = lengths.draws()
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        t0 = time.perf_counter() + 0.1
        origin = time.time() + (t0 - time.perf_counter())
        for i, (o, team) in enumerate(plan):
            o.gateway, o.serial, o.origin = i % len(gateways), i, origin
            url = gateways[o.gateway] + "/v1/completions"
            prompt = f"team={team.name} hello #{i}"
            body = {"model": "tiny", "prompt": prompt, "max_tokens": next(drawn), "stream": True}
            body |= extra or {}
            wait = t0 + o.due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(one(session, url, team, body, o, t0, deadline)))
        await asyncio.gather(*tasks)
    return [o for o, _ in plan]


# --- the arithmetic of the verdicts ---------------------------------------------------------------


def in_window(outcomes: list[Outcome], team: str, start: float, stop: float) -> list[Outcome]:
    return [o for o in outcomes if o.team == team and start <= o.due < stop]


def ttfts(outcomes: list[Outcome]) -> list[float]:
    """Sorted TTFTs of the requests that were not shed; one given up or failed counts as infinite."""
    out = [o.ttft if o.ttft is not None else math.inf for o in outcomes if o.status not in SHED]
    return sorted(out)


def pct(ordered: list[float], q: float) -> float | None:
    return percentile(ordered, q) if ordered else None


def turnover_s(mean_service_s: float, capacity: int) -> float:
    """One slot's turnover: how often, on average, a full pool frees a slot."""
    return mean_service_s / capacity


def ttft_bound(idle_p99_s: float, mean_service_s: float, capacity: int) -> float:
    """The quiet (or interactive) team's TTFT p99 bound under overload: its idle p99 plus one turnover."""
    return idle_p99_s + turnover_s(mean_service_s, capacity)


def shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: (v / total if total else 0.0) for k, v in counts.items()}


def split_error(counts: dict[str, int], weights: dict[str, float]) -> float:
    """The largest relative error of a team's share of the completed requests against its weight's
    share: 0.1 means some team got 10% more or less than its weight entitles it to."""
    got = shares(counts)
    total_w = sum(weights.values())
    return max(abs(got.get(k, 0.0) / (w / total_w) - 1) for k, w in weights.items())


def status_counts(outcomes: list[Outcome]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes:
        out[str(o.status)] = out.get(str(o.status), 0) + 1
    return out


def shed(outcomes: list[Outcome]) -> int:
    return sum(1 for o in outcomes if o.status in SHED)


def failed(outcomes: list[Outcome]) -> int:
    """Neither served nor shed: given up, broken, or another status."""
    return sum(1 for o in outcomes if o.status != 200 and o.status not in SHED)


def completed_between(outcomes: list[Outcome], team: str, start: float, stop: float) -> int:
    return sum(
        1 for o in outcomes if o.team == team and o.status == 200 and o.end is not None and start <= o.end < stop
    )

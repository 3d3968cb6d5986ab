"""Every Prometheus metric the gateway exports, declared in one place, with bounded labels only:
dialect (six values), public model name from the config (dynamic ``vendor/model`` names collapse to
``vendor/*``, the local catch-all to ``local``), provider and target ids from the config, team ids
from the config, outcome (a fixed set). Never request ids, keys, users or raw client strings.

Several worker processes serving one port share a ``PROMETHEUS_MULTIPROC_DIR`` (set by the CLI
before it forks); ``/metrics`` then aggregates every worker's files.

What every request updates goes through tallies: plain numbers on the event loop, added to
prometheus-client's values by ``flush`` before each scrape and every ``FLUSH_SECONDS``. A value's
update takes a lock (and, across workers, an mmap write), and a histogram's walks its buckets in
Python: about 40k instructions per request in all (callgrind), several times the tallies' cost.
"""

from __future__ import annotations

import asyncio
import os
from bisect import bisect_left
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as mp

FLUSH_SECONDS = 1.0
LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)

REQUESTS = Counter(
    "gateway_requests_total",
    "Requests answered, by ingress dialect, public model, provider, team and outcome",
    ["dialect", "model", "provider", "team", "outcome"],
)
DURATION = Histogram(
    "gateway_request_duration_seconds",
    "Whole request time, as the client sees it",
    ["dialect", "model"],
    buckets=LATENCY,
)
TTFT = Histogram("gateway_ttft_seconds", "Time to the first streamed token", ["dialect", "model"], buckets=LATENCY)
INTER_TOKEN = Histogram(
    "gateway_inter_token_seconds",
    "Mean gap between streamed chunks, one observation per stream",
    ["model"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
OVERHEAD_SECONDS = Histogram(
    "gateway_overhead_seconds", "Gateway time excluding the upstream wait", ["dialect"], buckets=OVERHEAD
)
TOKENS = Counter("gateway_tokens_total", "Tokens, from upstream usage", ["model", "team", "kind"])
RETRIES = Counter("gateway_retries_total", "Attempts beyond the first (fallbacks to another target)", ["model"])
COOLDOWNS = Counter("gateway_cooldowns_total", "Targets put in cool-down after repeated failures", ["target"])
DROPPED = Counter("gateway_dropped_features_total", "Features dropped by target config", ["target", "feature"])
IN_FLIGHT = Gauge("gateway_in_flight_requests", "Requests being served", ["dialect"], multiprocess_mode="livesum")
TARGET_UP = Gauge(
    "gateway_target_up", "1 when the target answered its last probe", ["target", "provider"], multiprocess_mode="max"
)
REPLICA_UP = Gauge(
    "gateway_replica_up",
    "1 when the replica's /health answered 200 at the last scrape",
    ["target", "replica"],
    multiprocess_mode="max",
)
REPLICA_LOAD = Gauge(
    "gateway_replica_engine_requests",
    "Requests running or waiting in the replica's engine, from its /metrics",
    ["target", "replica"],
    multiprocess_mode="max",
)


class ReplicaGaugeSet:
    """The replica pools' ``ReplicaGauges`` (``gateway.core.upstream``), on the two gauges above."""

    def replica_up(self, target: str, replica: str, up: bool) -> None:
        REPLICA_UP.labels(target, replica).set(1 if up else 0)

    def replica_load(self, target: str, replica: str, requests: float) -> None:
        REPLICA_LOAD.labels(target, replica).set(requests)


RATE_LIMIT = Counter("gateway_ratelimit_decisions_total", "Admission decisions by limit kind", ["limit", "decision"])
QUEUE_DEPTH = Gauge(
    "gateway_admission_queue_depth", "Requests waiting for a concurrency slot", [], multiprocess_mode="livesum"
)
ADMISSION_WAIT = Histogram("gateway_admission_wait_seconds", "Time spent waiting for admission", [], buckets=LATENCY)
REDIS_UP = Gauge("gateway_redis_up", "1 when Redis answered the last check", [], multiprocess_mode="min")
REDIS_LATENCY = Histogram(
    "gateway_redis_latency_seconds", "Redis round trips", [], buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)
)


def outcome(status: int, error: str | None) -> str:
    if status < 400 and error is None:
        return "ok"
    if status == 429:
        return "rate_limited"
    if status == 504 or error in ("upstream_timeout", "deadline_exceeded"):
        return "timeout"
    if status >= 500 or (error or "").startswith("upstream"):
        return "upstream_error"
    if error == "client_gone":
        return "cancelled"
    return "client_error"


def exposition() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        mp.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


# --- tallies ------------------------------------------------------------------------------------


class CountTally:
    """Increments of one counter child: ``n += amount`` on the hot path."""

    __slots__ = ("_child", "n")

    def __init__(self, child: Counter) -> None:
        self._child = child
        self.n: float = 0
        _TALLIES.append(self)

    def flush(self) -> None:
        if self.n:
            n, self.n = self.n, 0
            self._child.inc(n)


class LevelTally:
    """The level of one gauge child (requests in flight): ``n`` moves, the gauge is set on flush."""

    __slots__ = ("_child", "_shown", "n")

    def __init__(self, child: Gauge) -> None:
        self._child = child
        self.n = 0
        self._shown = 0
        _TALLIES.append(self)

    def flush(self) -> None:
        if self.n != self._shown:
            self._shown = self.n
            self._child.set(self.n)


class HistogramTally:
    """Observations of one histogram child, as bucket counts and a sum."""

    __slots__ = ("_bounds", "_child", "counts", "total")

    def __init__(self, child: Histogram) -> None:
        self._child: Any = child  # its bounds and per-bucket values are not public API: see ``flush``
        self._bounds = list(self._child._upper_bounds)  # ends with +Inf: every value has a bucket
        self.counts = [0] * len(self._bounds)
        self.total = 0.0
        _TALLIES.append(self)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self._bounds, value)] += 1  # the first bound >= value, as observe()
        self.total += value

    def flush(self) -> None:
        counts = self.counts
        if not any(counts):
            return
        # prometheus-client keeps one value per bucket (``_buckets``) and one for the sum; adding to
        # them is what ``observe`` does, once per observation (tests/unit/test_metrics.py checks it).
        for value, n in zip(self._child._buckets, counts, strict=True):
            if n:
                value.inc(n)
        self._child._sum.inc(self.total)
        self.counts = [0] * len(counts)
        self.total = 0.0


_TALLIES: list[CountTally | LevelTally | HistogramTally] = []


def flush() -> None:
    """Every tally into prometheus-client's values; on the event loop that updates them."""
    for tally in _TALLIES:
        tally.flush()


async def flusher() -> None:
    """Other workers' scrapes read this one's values from its files: at most a second behind."""
    while True:
        await asyncio.sleep(FLUSH_SECONDS)
        flush()


# Updated per request or per Redis round trip outside ``gateway.obs.logs``.
ADMITTED = CountTally(RATE_LIMIT.labels("all", "admit"))
ADMITTED_AHEAD = CountTally(RATE_LIMIT.labels("all", "admit_ahead"))  # of them, on an admission made ahead
GIVEN_BACK = CountTally(RATE_LIMIT.labels("all", "give_back"))  # requests' admissions made ahead that no request took
ADMISSION_WAITS = HistogramTally(ADMISSION_WAIT)
REDIS_ROUND_TRIPS = HistogramTally(REDIS_LATENCY)
REDIS_STATE = LevelTally(REDIS_UP)  # set on each Redis answer or failure: the gauge's file on change only

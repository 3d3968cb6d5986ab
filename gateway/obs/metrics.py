"""Every Prometheus metric the gateway exports, declared in one place, with bounded labels only:
dialect (six values), public model name from the config (dynamic ``vendor/model`` names collapse to
``vendor/*``, the local catch-all to ``local``), provider and target ids from the config, team ids
from the config, a replica pool's replica labels (its target id and each replica's host, from the
config), outcome and the routing words of ``gateway.core.pool_report`` (fixed sets). Never request ids,
keys, users, sessions or raw client strings.

Several worker processes serving one port share a ``PROMETHEUS_MULTIPROC_DIR`` (set by the CLI
before it forks); ``/metrics`` then aggregates every worker's files.

The counters and gauges every request updates go through tallies: plain numbers on the event loop,
added to prometheus-client's values by ``flush`` before each scrape and every ``FLUSH_SECONDS``, as a
value's update takes a lock (and, across workers, an mmap write). Histograms are observed through
prometheus-client's public ``observe``: adding counts to its buckets would mean writing its private
values.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Metric,
    generate_latest,
)
from prometheus_client import multiprocess as mp

from gateway.runtime.internals import BucketTally

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
UPSTREAM_FAILURES = Counter(
    "gateway_upstream_failures_total", "Failed tries of a target, by error code", ["target", "code"]
)
RESUMES = Counter(
    "gateway_stream_resumes_total",
    "Streams continued after a mid-stream break, by the broken target",
    ["target", "cause"],
)
RESUME_LOST = Histogram(
    "gateway_stream_resume_lost_seconds",
    "Time from a break to its continuation's first event",
    ["target"],
    buckets=LATENCY,
)
DROPPED = Counter(
    "gateway_dropped_features_total", "Features dropped by target config, or advisory ones", ["target", "feature"]
)
IN_FLIGHT = Gauge("gateway_in_flight_requests", "Requests being served", ["dialect"], multiprocess_mode="livesum")
TARGET_UP = Gauge(
    "gateway_target_up", "1 when the target answered its last probe", ["target", "provider"], multiprocess_mode="max"
)


def _per_replica(name: str, documentation: str) -> Gauge:
    """A replica's figure from its last scrape: every worker scrapes, so the highest is shown."""
    return Gauge(name, documentation, ["target", "replica"], multiprocess_mode="max")


REPLICA_UP = _per_replica("gateway_replica_up", "1 when the replica's /health answered 200 at the last scrape")
REPLICA_LOAD = _per_replica(
    "gateway_replica_engine_requests", "Requests running or waiting in the replica's engine, from its /metrics"
)
# vLLM's own scaling signals (``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``)
REPLICA_WAITING = _per_replica(
    "gateway_replica_engine_waiting", "Requests waiting in the replica's engine queue, from its /metrics"
)
REPLICA_KV_USAGE = _per_replica(
    "gateway_replica_kv_cache_usage", "Fraction of the replica's KV cache in use (0-1), from its /metrics"
)


class ReplicaGaugeSet:
    """The replica pools' ``ReplicaGauges`` (``gateway.core.upstream``), on the gauges above."""

    def replica_up(self, target: str, replica: str, up: bool) -> None:
        REPLICA_UP.labels(target, replica).set(1 if up else 0)

    def replica_load(self, target: str, replica: str, running: float, waiting: float, kv_usage: float) -> None:
        REPLICA_LOAD.labels(target, replica).set(running + waiting)
        REPLICA_WAITING.labels(target, replica).set(waiting)
        REPLICA_KV_USAGE.labels(target, replica).set(kv_usage)


# Routing among a pool's replicas (``gateway.obs.routing``; the words are ``gateway.core.pool_report``'s):
# each request's decision, by what decided it (source) and how (outcome); the calls to the shared prefix
# index that timed out or failed (the local index routes meanwhile); per replica, the KV-cache events
# its view applied, the times it was emptied (batches lost that no replay recovered, or undecodable),
# and the replays asked of its publisher, answered to their end, or given up.
ROUTED = Counter("gateway_routing_decisions_total", "Requests a replica pool routed", ["target", "source", "outcome"])
SHARED_FALLBACKS = Counter("gateway_shared_prefix_fallbacks_total", "Shared index calls given up", ["target", "cause"])
KV_EVENTS = Counter("gateway_kv_events_total", "KV-cache events a view applied", ["target", "replica", "kind"])
KV_EVENTS_GAPS = Counter("gateway_kv_events_gaps_total", "Times a replica's view was emptied", ["target", "replica"])
KV_EVENTS_REPLAYS = Counter("gateway_kv_events_replays_total", "KV-events replays", ["target", "replica", "step"])


def _per_feed(name: str, documentation: str, mode: Literal["livemin", "livemax"]) -> Gauge:
    """A replica's events feed as a worker sees it. Every worker subscribes to every replica: the least
    connected and stalest worker's feed is shown, and the fullest view."""
    return Gauge(name, documentation, ["target", "replica"], multiprocess_mode=mode)


KV_EVENTS_CONNECTED = _per_feed(
    "gateway_kv_events_connected", "1 while the replica's KV-events publisher is connected", "livemin"
)
KV_EVENTS_LAST_BATCH = _per_feed(
    "gateway_kv_events_last_batch_timestamp_seconds",
    "Unix time of the last live batch of KV-cache events from the replica (0: none yet)",
    "livemin",
)
KV_EVENTS_BLOCKS = _per_feed("gateway_kv_events_blocks", "Blocks the replica's view holds", "livemax")


RATE_LIMIT = Counter("gateway_ratelimit_decisions_total", "Admission decisions by limit kind", ["limit", "decision"])
QUEUE_DEPTH = Gauge(
    "gateway_admission_queue_depth", "Requests waiting for a concurrency slot", [], multiprocess_mode="livesum"
)


def _per_model(name: str, documentation: str) -> Gauge:
    """A level per public model, summed over the live workers: for autoscalers (``gateway.obs.load``)."""
    return Gauge(name, documentation, ["model"], multiprocess_mode="livesum")


MODEL_IN_FLIGHT = _per_model(
    "gateway_model_in_flight_requests", "Requests being served per public model, those waiting in admission included"
)
MODEL_QUEUE_DEPTH = _per_model(
    "gateway_model_admission_queue_depth", "Requests waiting for a concurrency slot, per public model"
)
MODEL_QUEUED_TOKENS = _per_model(
    "gateway_model_queued_tokens",
    "Tokens the requests waiting for a concurrency slot are estimated to need (prompt and answer), per model",
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


class _InForce:
    """The workers' files, less the config versions no longer in force: a worker's file keeps a
    series it ``remove``d (at 0), so without this ``gateway_config_info`` would grow a series per
    worker and reload."""

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        merged = mp.MultiProcessCollector.merge(_sized(self.path), accumulate=True)  # type: ignore[no-untyped-call]
        for family in merged:
            if family.name == "gateway_config_info":
                family.samples = [s for s in family.samples if s.value != 0]
            yield family


def _sized(path: str) -> list[str]:
    """The workers' files that have their header. A worker creates its file before sizing it, so a
    scrape while one starts can find it empty, and prometheus-client's reader then fails the whole
    scrape (a 500 on /metrics; client_python issue 1199): an empty file holds nothing yet."""
    found = []
    for entry in os.scandir(path):
        try:
            if entry.name.endswith(".db") and entry.stat().st_size > 0:
                found.append(entry.path)
        except FileNotFoundError:  # a dead worker's live gauges removed as we list them
            continue
    return found


def registry() -> CollectorRegistry:
    """What /metrics and /status read: this process's registry, or every worker's files."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        return REGISTRY
    files = CollectorRegistry()
    files.register(_InForce(path))
    return files


def exposition() -> tuple[bytes, str]:
    return generate_latest(registry()), CONTENT_TYPE_LATEST


# --- tallies ------------------------------------------------------------------------------------


class Tallies:
    """The tallies one owner flushes: an app's (its requests' series and in-flight levels, made by
    ``gateway.web.record``), or ``PROCESS``'s, for the process-wide figures declared below (Redis, the
    limits), whose metrics are the process's as prometheus-client's registry is."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[CountTally | LevelTally | BucketTally] = []

    def flush(self) -> None:
        for tally in self.items:
            tally.flush()


PROCESS = Tallies()


class CountTally:
    """Increments of one counter child: ``n += amount`` on the hot path. ``per``: ``n`` counts in
    this many parts of the counter's unit (millionths of a currency: integers, summed exactly)."""

    __slots__ = ("_child", "_per", "n")

    def __init__(self, child: Counter, owner: Tallies = PROCESS, per: int = 1) -> None:
        self._child = child
        self._per = per
        self.n: float = 0
        owner.items.append(self)

    def flush(self) -> None:
        if self.n:
            n, self.n = self.n, 0
            self._child.inc(n / self._per if self._per != 1 else n)


class LevelTally:
    """The level of one gauge child (requests in flight): ``n`` moves, the gauge is set on flush."""

    __slots__ = ("_child", "_shown", "n")

    def __init__(self, child: Gauge, owner: Tallies = PROCESS) -> None:
        self._child = child
        self.n: float = 0
        self._shown: float = 0
        owner.items.append(self)

    def flush(self) -> None:
        if self.n != self._shown:
            self._shown = self.n
            self._child.set(self.n)


_HISTOGRAMS: dict[int, tuple[Histogram, BucketTally]] = {}  # by the child's id (the child kept with it)


def histogram(child: Histogram) -> BucketTally:
    """The tally of one histogram child: observations counted on the loop and put on the child's
    buckets and sum by ``flush`` (``gateway.runtime.internals.BucketTally``: prometheus-client has no
    public way to add counts to a bucket, and its ``observe`` takes two locks and walks the buckets
    each time). A child has one tally, shared by whoever observes it."""
    known = _HISTOGRAMS.get(id(child))
    if known is None or known[0] is not child:
        known = _HISTOGRAMS[id(child)] = (child, BucketTally(child))
        PROCESS.items.append(known[1])
    return known[1]


def flush(*owned: Tallies) -> None:
    """The process's tallies and ``owned`` (an app's) into prometheus-client's values; on the event
    loop that updates them."""
    PROCESS.flush()
    for tallies in owned:
        tallies.flush()


async def flusher(*owned: Tallies) -> None:
    """Other workers' scrapes read this one's values from its files: at most a second behind."""
    while True:
        await asyncio.sleep(FLUSH_SECONDS)
        flush(*owned)


# Updated per request or per Redis round trip outside ``gateway.obs.logs``.
ADMITTED = CountTally(RATE_LIMIT.labels("all", "admit"))
ADMITTED_AHEAD = CountTally(RATE_LIMIT.labels("all", "admit_ahead"))  # of them, on an admission made ahead
GIVEN_BACK = CountTally(RATE_LIMIT.labels("all", "give_back"))  # requests' admissions made ahead that no request took
ADMISSION_WAITS = histogram(ADMISSION_WAIT)
REDIS_ROUND_TRIPS = histogram(REDIS_LATENCY)
REDIS_STATE = LevelTally(REDIS_UP)  # set on each Redis answer or failure: the gauge's file on change only

# Settlements Redis did not take, held until it answers (``gateway.limits.backlog``), and what of them
# had to be given up: a request's usage ("usage"), a lease left to expire by its TTL ("lease"), or
# usage whose fate cannot be known any more ("usage_unknown"): its call went out unanswered and was
# not answered when sent again within ``scripts.ONCE_HOLD_SECONDS`` (or the gateway shut down first).
SETTLEMENTS_HELD_GAUGE = Gauge(
    "gateway_limits_settlements_held", "Settlements held while Redis is unavailable", [], multiprocess_mode="livesum"
)
SETTLEMENTS_DROPPED_TOTAL = Counter(
    "gateway_limits_settlements_dropped_total", "Held settlements given up, by part", ["part"]
)
SETTLEMENTS_HELD = LevelTally(SETTLEMENTS_HELD_GAUGE)
USAGE_DROPPED = CountTally(SETTLEMENTS_DROPPED_TOTAL.labels("usage"))
LEASES_DROPPED = CountTally(SETTLEMENTS_DROPPED_TOTAL.labels("lease"))
USAGE_UNKNOWN = CountTally(SETTLEMENTS_DROPPED_TOTAL.labels("usage_unknown"))


# Config reloads (gateway.web.reload): the config in force, 1 on its version and hash (earlier ones
# read 0; with several workers, one series per worker, so a reload that reached all of them shows).
CONFIG_INFO = Gauge(
    "gateway_config_info",
    "The config in force: 1 on its version and hash",
    ["version", "hash"],
    multiprocess_mode="liveall",
)
CONFIG_RELOADS = Counter("gateway_config_reloads_total", "Config reloads, by result", ["result"])
RELOAD_RESULTS = ("applied", "unchanged", "refused")  # the label's values


def set_config_info(version: int, digest: str, previous: tuple[int, str] | None = None) -> None:
    if previous is not None:
        # 0 first: with several workers the value lives on in this worker's file after ``remove``
        CONFIG_INFO.labels(str(previous[0]), previous[1]).set(0)
        CONFIG_INFO.remove(str(previous[0]), previous[1])
    CONFIG_INFO.labels(str(version), digest).set(1)


# Spend (gateway.limits.budget_rules): team and model labels come from the config, currency is the one configured.
SPEND = Counter("gateway_spend", "Spend of settled requests, in the configured currency", ["team", "model", "currency"])
BUDGET_USE = Gauge(
    "gateway_budget_utilisation",
    "A team budget's spend (with the last admitted request's worst case) over its amount, as of this "
    "replica's last admission",
    ["team", "unit"],
    multiprocess_mode="max",
)

_BUDGET_USE: dict[tuple[str, str], LevelTally] = {}


def budget_use(team: str, unit: str) -> LevelTally:
    """The level of ``BUDGET_USE`` for a team and unit, set by each admission with budgets: set on the
    gauge at the next flush (before each scrape), as ``labels()`` and a gauge's set take a lock each.
    Teams come from the config: a bounded label."""
    tally = _BUDGET_USE.get((team, unit))
    if tally is None:
        tally = _BUDGET_USE[team, unit] = LevelTally(BUDGET_USE.labels(team, unit))
    return tally


BUDGET_EXCEEDED = Counter("gateway_budget_exceeded", "Requests admitted past a soft budget", ["team", "scope"])


# --- fair queuing (gateway.limits.fairq): labels are config names (model, class, team) -------------

FAIR_WAITING = Gauge(
    "gateway_fair_waiting",
    "Requests waiting for a model's slot in this gateway, by model, class and team",
    ["model", "class", "team"],
    multiprocess_mode="livesum",
)
FAIR_WAIT = Histogram(
    "gateway_fair_wait_seconds",
    "Time a request waited for a model's slot (admitted requests)",
    ["model", "class", "team"],
    buckets=LATENCY,
)
FAIR_SHED = Counter(
    "gateway_fair_shed_total",
    "Requests refused by a model's queue, by reason (full, evicted, timeout, down)",
    ["model", "class", "team", "reason"],
)
FAIR_SLOTS = Gauge("gateway_fair_slots", "A model's slots this gateway holds", ["model"], multiprocess_mode="livesum")
FAIR_CAPACITY = Gauge(
    "gateway_fair_capacity",
    "A model's capacity in force here (its share while Redis is out)",
    ["model"],
    multiprocess_mode="max",
)

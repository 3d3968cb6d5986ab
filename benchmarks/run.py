"""The gateway's overhead benchmark, in one command (benchmarks/README.md).

    scripts/bench            # full run, about 14 minutes (200k-request soak, capped at 10 minutes)
    scripts/bench --quick    # about 3 minutes (20k-request soak)
    scripts/bench --redis    # adds a subject: the gateway with Redis-backed limits (private redis-server)

Subjects, each measured the same way against one fake upstream (``tests/fakes/upstream``, its fast front end):

* ``direct``: wrk straight at the fake upstream: the floor of this machine;
* ``yardstick``: a bare aiohttp pass-through proxy (``yardstick_proxy.py``);
* ``gateway``: ``llm-gateway serve --workers 1`` with ``gateway.yaml``, once per client dialect.

They are started by ``subjects.py``; ``load.py`` runs the load and reads what each run cost.

The subject runs on core 0; the fake upstream, wrk and this runner on core 1 (``taskset``). Per subject:
requests/s and latency percentiles at 1, 8 and 64 connections (wrk, closed loop), CPU µs per request of
the subject's process tree (utime+stime from /proc, children included), 64-chunk streams/s, time to
first token at concurrency 1 (aiohttp client), peak RSS (VmHWM); for the gateway also RSS growth over a
soak. Writes ``benchmarks/results/latest.json`` and ``latest.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from benchmarks import resume_cost
from benchmarks.clients import CHUNKS, DIALECTS, OPENAI, Dialect, pacing, preflight, run_async, ttft
from benchmarks.load import Load, Probe
from benchmarks.machine import ensure_wrk, machine_meta
from benchmarks.procs import ROOT, BenchError, Cores, Processes, background_load, choose_cores, log, worker_memory
from benchmarks.report import evaluate, notes, render
from benchmarks.subjects import Gateway, start_gateways, start_upstream, start_yardstick

RESULTS = ROOT / "benchmarks" / "results"
CONCURRENCIES = (1, 8, 64)
STREAM_CONNECTIONS = 64
ROUND_CONNECTIONS = 64  # the interleaved rounds, plain and streamed: the targets' concurrency
LATENCY_KEYS = ("c1_p50_ms", "ttft_p50_ms")  # the interleaved rounds' latency figures, per round
# Paced streams: chunks 1 ms apart, as a model writes tokens (a fast one); each read then carries one
# chunk, so the per-chunk relay cost shows. 16 streams at once stay within one core's capacity.
PACED_GAP_MS = 1.0
PACED_CONNECTIONS = 16
SOAK_CONNECTIONS = 64
BY_NAME = {d.name: d for d in DIALECTS}


@dataclass(frozen=True)
class Profile:
    name: str
    warmup_s: int
    run_s: int
    stream_s: int
    ttft_samples: int
    soak_requests: int
    soak_cap_s: int
    rounds: int  # interleaved rounds for the ratio targets
    round_s: int


QUICK = Profile(
    "quick", warmup_s=1, run_s=2, stream_s=2, ttft_samples=100, soak_requests=20_000, soak_cap_s=90, rounds=2, round_s=1
)
FULL = Profile(
    "full",
    warmup_s=2,
    run_s=10,
    stream_s=10,
    ttft_samples=400,
    soak_requests=200_000,
    soak_cap_s=600,
    rounds=5,
    round_s=3,
)


# --- one subject ------------------------------------------------------------------------------------


def measure(
    load: Load,
    profile: Profile,
    subject: str,
    url: str,
    dialect: Dialect,
    probe: Probe,
    rate: int,
    upstream: str,
) -> dict[str, Any]:
    label = f"{subject}/{dialect.name}"
    out: dict[str, Any] = {"subject": subject, "dialect": dialect.name, "url": url}
    log(f"{label}: preflight")
    out["preflight"] = run_async(preflight(url, dialect))
    if not out["preflight"]["ok"]:
        log(f"{label}: NOT MEASURED: {out['preflight'].get('error')}")
        return out
    load.wrk(url, dialect, 8, profile.warmup_s, probe)  # warm-up, not kept
    runs: dict[str, Any] = {}
    for c in CONCURRENCIES:
        log(f"{label}: {c} connection(s), {profile.run_s} s")
        runs[f"c{c}"] = load.wrk(url, dialect, c, profile.run_s, probe)
    if dialect.streams:
        streams(load, profile, label, url, dialect, probe, upstream, runs)
    if rate:
        log(f"{label}: open loop, {rate} requests/s, {profile.run_s} s")
        runs["fixed_rate"] = load.open_loop(url, dialect, rate, profile.run_s, probe)
    out["runs"] = runs
    if dialect.streams:
        log(f"{label}: time to first token, {profile.ttft_samples} sequential streams")
        out["ttft"] = run_async(ttft(url, dialect, profile.ttft_samples))
    if probe.server_pid:
        out["memory"] = worker_memory(probe.server_pid)
    return out


def streams(
    load: Load,
    profile: Profile,
    label: str,
    url: str,
    dialect: Dialect,
    probe: Probe,
    upstream: str,
    runs: dict[str, Any],
) -> None:
    """A streaming dialect's stream runs: bursts, then chunks paced apart."""
    log(f"{label}: streams, {STREAM_CONNECTIONS} connections, {profile.stream_s} s")
    runs["stream"] = load.wrk(url, dialect, STREAM_CONNECTIONS, profile.stream_s, probe, stream=True)
    log(f"{label}: paced streams ({PACED_GAP_MS} ms apart), {PACED_CONNECTIONS} connections, {profile.stream_s} s")
    before = run_async(pacing(upstream, 0.0, PACED_GAP_MS))
    try:
        runs["stream_paced"] = load.wrk(url, dialect, PACED_CONNECTIONS, profile.stream_s, probe, stream=True)
    finally:
        run_async(pacing(upstream, before["ttft_ms"], before["gap_ms"]))


Column = tuple[str, str, Dialect, Probe]  # subject, url, dialect, probe
NONE: dict[str, Any] = {"errors": 0, "requests": 0, "rps": 0.0}  # no stream run (embeddings)


def round_ttft_samples(profile: Profile) -> int:
    """Sequential streams timed per column per interleaved round: the profile's spread over them."""
    return max(20, profile.ttft_samples // max(1, profile.rounds))


def interleaved(
    load: Load, profile: Profile, columns: list[Column], direct: Column | None = None
) -> dict[str, dict[str, Any]]:
    """Every column in turn, ``profile.rounds`` rounds in alternating order: CPU per request and p99
    latency (c64) and streams/s (c64), and the two latency targets' figures (p50 at concurrency 1, TTFT p50 over
    sequential streams), for which ``direct`` takes its turn too. The machine is shared and its speed
    drifts by tens of percent over minutes: one long run per subject lets a slow spell land on one
    subject only, while rounds spread it over all of them. The targets are read from these rounds
    (ratios of medians; for latency, the median of each round's difference from direct's). Columns
    that fail their preflight are left out (reported as not measured, as their full runs are)."""
    measured: list[Column] = []
    for column in columns:
        subject, url, dialect, probe = column
        if run_async(preflight(url, dialect))["ok"]:
            load.wrk(url, dialect, 8, profile.warmup_s, probe)  # warm-up, not kept: round 1 is not a cold one
            measured.append(column)
    keys = (
        "cpu_us",
        "c64_p99_ms",
        "stream_rps",
        "errors",
        "foreign_pct_subject_core",
        "foreign_pct_load_core",
        *LATENCY_KEYS,
    )
    out: dict[str, dict[str, Any]] = {
        f"{s}/{d.name}": {k: [] for k in keys} | {"requests": 0} for s, _, d, _ in measured
    }
    turns = list(measured)
    if direct is not None:
        turns.insert(0, direct)
        out[f"{direct[0]}/{direct[2].name}"] = {k: [] for k in LATENCY_KEYS}
    samples = round_ttft_samples(profile)
    for i in range(profile.rounds):
        log(f"interleaved round {i + 1} of {profile.rounds}: {len(turns)} columns")
        for column in turns if i % 2 == 0 else turns[::-1]:
            subject, url, dialect, probe = column
            slot = out[f"{subject}/{dialect.name}"]
            alone = load.wrk(url, dialect, 1, profile.round_s, probe)
            slot["c1_p50_ms"].append(alone["latency_ms"]["p50"])
            first = run_async(ttft(url, dialect, samples))["first_token_ms"]["p50"] if dialect.streams else None
            slot["ttft_p50_ms"].append(first)
            if column is direct:
                continue
            plain = load.wrk(url, dialect, ROUND_CONNECTIONS, profile.round_s, probe)
            stream = (
                load.wrk(url, dialect, ROUND_CONNECTIONS, profile.round_s, probe, stream=True)
                if dialect.streams
                else NONE
            )
            slot["cpu_us"].append(plain.get("server_cpu_us_per_req"))
            slot["c64_p99_ms"].append(plain["latency_ms"]["p99"])
            slot["stream_rps"].append(round(stream["rps"], 1) if dialect.streams else None)
            slot["errors"].append(alone["errors"] + plain["errors"] + stream["errors"])
            for key in ("foreign_pct_subject_core", "foreign_pct_load_core"):
                slot[key].append(max(run.get(key, 0.0) for run in (alone, plain, stream)))
            slot["requests"] += alone["requests"] + plain["requests"] + stream["requests"]
    return out


def soak(load: Load, profile: Profile, url: str, probe: Probe, requests: int, rps: float) -> dict[str, Any]:
    """Non-streaming requests at 64 connections in wrk rounds (wrk runs for a time, not a count) until
    ``requests`` are done or the time cap is reached; the worker's RSS after each round. ``rps`` is the
    first guess of the rate, to size the rounds (it overshoots by at most about one second's worth)."""
    assert probe.server_pid is not None
    before = worker_memory(probe.server_pid)
    began = time.monotonic()
    done, errors, rounds = 0, 0, []
    rps = max(rps, 1.0)
    while done < requests:
        left_s = profile.soak_cap_s - (time.monotonic() - began)
        if left_s < 1:
            break
        seconds = int(min(30, left_s, max(1, math.floor((requests - done) / rps))))
        r = load.wrk(url, OPENAI, SOAK_CONNECTIONS, seconds, probe)
        done += r["requests"]
        errors += r["errors"]
        rps = max(r["rps"], 1.0)
        mem = worker_memory(probe.server_pid)
        rounds.append({"requests_so_far": done, "vmrss_mib": round(mem["vmrss_mib"], 2), "rps": round(r["rps"])})
        log(f"soak: {done}/{requests} requests, RSS {mem['vmrss_mib']:.1f} MiB")
    after = worker_memory(probe.server_pid)
    return {
        "target_requests": requests,
        "requests": done,
        "complete": done >= requests,
        "errors": errors,
        "seconds": round(time.monotonic() - began, 1),
        "connections": SOAK_CONNECTIONS,
        "rss_before_mib": round(before["vmrss_mib"], 2),
        "rss_after_mib": round(after["vmrss_mib"], 2),
        "rss_max_mib": round(max([r["vmrss_mib"] for r in rounds] + [after["vmrss_mib"]]), 2),
        "vmhwm_after_mib": round(after["vmhwm_mib"], 2),
        "growth_pct": round((after["vmrss_mib"] - before["vmrss_mib"]) / before["vmrss_mib"] * 100, 2)
        if before["vmrss_mib"]
        else None,
        "rounds": rounds,
    }


# --- main -------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="about 3 minutes: short runs, 20k-request soak")
    p.add_argument("--redis", action="store_true", help="also measure the gateway with Redis-backed team limits")
    p.add_argument("--queue", action="store_true", help="the model has a fair queue, never full (its free-slot cost)")
    p.add_argument("--no-gateway", action="store_true", help="only direct and the yardstick")
    p.add_argument(
        "--dialects", default=",".join(d.name for d in DIALECTS), help="gateway dialects to measure (comma-separated)"
    )
    p.add_argument("--soak-requests", type=int, help="override the soak's request count (0: no soak)")
    p.add_argument(
        "--rate", type=int, default=1000, help="open-loop arrival rate, requests/s (default 1000; 0: no open-loop run)"
    )
    p.add_argument("--upstream-ttft-ms", type=float, default=0.0, help="fake upstream: delay before the first chunk")
    p.add_argument("--upstream-gap-ms", type=float, default=0.0, help="fake upstream: delay between chunks")
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run every benchmark process at this niceness (e.g. -10, as root) to push other work on a shared "
        "machine aside; default 0",
    )
    p.add_argument(
        "--rounds",
        type=int,
        help="interleaved rounds for the CPU and streams/s ratios (default 5, --quick 2): more of them on a "
        "machine whose speed drifts",
    )
    p.add_argument(
        "--resume-only",
        action="store_true",
        help="only the mid-stream resume on/off comparison (benchmarks/resume_cost.py): resume.json and resume.md",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="where latest.json and latest.md go")
    p.add_argument("--keep-logs", action="store_true", help="keep the temporary directory (config, process logs)")
    a = p.parse_args(argv)
    known = {d.name for d in DIALECTS}
    a.dialect_list = [x for x in a.dialects.split(",") if x]
    if unknown := set(a.dialect_list) - known:
        p.error(f"unknown dialect(s): {', '.join(sorted(unknown))}")
    return a


def _terminate(signum: int, frame: Any) -> NoReturn:
    raise SystemExit(128 + signum)


@dataclass
class Run:
    """What every measurement of one run shares, and what the run has measured so far."""

    load: Load
    profile: Profile
    rate: int
    procs: Processes
    results: list[dict[str, Any]] = field(default_factory=list)
    soak: dict[str, Any] = field(default_factory=dict)
    resumed: dict[str, Any] = field(default_factory=dict)
    server_logs: dict[str, dict[str, Any]] = field(default_factory=dict)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ensure_wrk()
    if args.resume_only:
        return resume_cost.run_alone(args)
    profile = QUICK if args.quick else FULL
    if args.rounds is not None:
        profile = dataclasses.replace(profile, rounds=args.rounds)
    soak_requests = profile.soak_requests if args.soak_requests is None else args.soak_requests
    signal.signal(signal.SIGTERM, _terminate)
    cores = choose_cores(args.nice)
    if args.nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # the runner too (it is the TTFT client)
    log("measuring background load (1 s)")
    background = background_load()
    if cores.load is not None:
        os.sched_setaffinity(0, {cores.load})  # the runner (TTFT client) stays off the subject's core
    meta = machine_meta(args, cores, background)
    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    run = Run(Load(cores), profile, args.rate, Processes(tmp))
    started = time.monotonic()
    try:
        measure_subjects(run, cores, tmp, args, soak_requests)
    finally:
        run.procs.stop_all()
        if args.keep_logs:
            log(f"logs and configs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    meta.update(foreign_load(run.results))
    meta["duration_s"] = round(time.monotonic() - started, 1)
    meta["server_logs"] = run.server_logs
    report_run(args, run, meta, soak_requests)
    return 0


def measure_subjects(run: Run, cores: Cores, tmp: Path, args: argparse.Namespace, soak_requests: int) -> None:
    """direct; every subject started, then measured in the interleaved rounds; then each in full (the
    yardstick, each gateway and its soak), stopped once measured; then resume on and off."""
    upstream = start_upstream(run.procs, cores, args)
    direct_probe = Probe(None, upstream.pid)
    run.results.append(
        measure(run.load, run.profile, "direct", upstream.url, OPENAI, direct_probe, run.rate, upstream.url)
    )
    yard_url, yard_probe = start_yardstick(run.procs, cores, upstream)
    gateways = start_gateways(run.procs, cores, tmp, upstream, args)
    columns: list[Column] = [("yardstick", yard_url, OPENAI, yard_probe)]
    for gw in gateways:
        columns += [(gw.subject, gw.url, BY_NAME[n], gw.probe) for n in gw.dialects]
    direct = ("direct", upstream.url, OPENAI, Probe(None, upstream.pid))
    rounds = interleaved(run.load, run.profile, columns, direct) if run.profile.rounds else {}
    run.results[0]["rounds"] = rounds.get("direct/openai")

    r = measure(run.load, run.profile, "yardstick", yard_url, OPENAI, yard_probe, run.rate, upstream.url)
    run.results.append({**r, "rounds": rounds.get("yardstick/openai")})
    run.procs.stop("yardstick")
    for gw in gateways:
        measure_gateway(run, gw, rounds, upstream.url, soak_requests)
    if not args.no_gateway:  # resume on and off, in the same run (benchmarks/resume_cost.py)
        resume_upstream, resume_subjects = resume_cost.start(run.procs, cores, tmp)
        run.resumed = resume_cost.rounds(
            run.load, resume_upstream, resume_subjects, run.profile.rounds, run.profile.round_s
        )


def measure_gateway(
    run: Run, gw: Gateway, rounds: dict[str, dict[str, Any]], upstream: str, soak_requests: int
) -> None:
    """One gateway subject in full: each of its dialects, then (the plain gateway's) the soak; then it
    stops, and its log's size per request and its error lines are counted."""
    requests_before = sum(v["requests"] for k, v in rounds.items() if k.startswith(gw.subject + "/"))
    for name in gw.dialects:
        r = measure(run.load, run.profile, gw.subject, gw.url, BY_NAME[name], gw.probe, run.rate, upstream)
        run.results.append({**r, "rounds": rounds.get(f"{gw.subject}/{name}")})
        requests_before += sum(x["requests"] for x in r.get("runs", {}).values())
    if gw.subject == "gateway" and soak_requests > 0:
        log(f"soak: {soak_requests} requests at {SOAK_CONNECTIONS} connections")
        guess = next((r["runs"]["c64"]["rps"] for r in run.results if r["subject"] == gw.subject and "runs" in r), 0)
        run.soak = soak(run.load, run.profile, gw.url, gw.probe, soak_requests, guess or 1000.0)
        run.soak["requests_before_soak"] = requests_before
        requests_before += run.soak["requests"]
    run.procs.stop(gw.subject)
    run.server_logs[gw.subject] = {
        "bytes": run.procs.log_bytes(gw.subject),
        "bytes_per_request": round(run.procs.log_bytes(gw.subject) / max(1, requests_before), 1),
        "error_lines": run.procs.count_lines(gw.subject, '"level":"error"'),
    }
    if gw.redis:
        run.procs.stop("redis")


def foreign_load(results: list[dict[str, Any]]) -> dict[str, float]:
    """The most of the subject's and the load's cores that other work took, over every run."""
    runs = [x for r in results for x in r.get("runs", {}).values()]
    # direct leaves the subject's core idle, and other work moves onto it: not interference, not counted
    subject_runs = [x for r in results if r["subject"] != "direct" for x in r.get("runs", {}).values()]
    # the interleaved rounds' runs count too: the targets are read from them
    round_subject = [v for r in results for v in (r.get("rounds") or {}).get("foreign_pct_subject_core", ())]
    round_load = [v for r in results for v in (r.get("rounds") or {}).get("foreign_pct_load_core", ())]
    return {
        "max_foreign_subject_core_pct": max(
            [*(x.get("foreign_pct_subject_core", 0.0) for x in subject_runs), *round_subject], default=0.0
        ),
        "max_foreign_load_core_pct": max(
            [*(x.get("foreign_pct_load_core", 0.0) for x in runs), *round_load], default=0.0
        ),
    }


def report_run(args: argparse.Namespace, run: Run, meta: dict[str, Any], soak_requests: int) -> None:
    """``latest.json`` and ``latest.md`` (with resume's section when it ran), the markdown on stdout."""
    profile = run.profile
    settings = {
        "profile": profile.__dict__,
        "round_ttft_samples": round_ttft_samples(profile),
        "concurrencies": CONCURRENCIES,
        "stream_connections": STREAM_CONNECTIONS,
        "paced_gap_ms": PACED_GAP_MS,
        "paced_connections": PACED_CONNECTIONS,
        "soak_connections": SOAK_CONNECTIONS,
        "chunks": CHUNKS,
        "soak_requests": soak_requests,
        "upstream_ttft_ms": args.upstream_ttft_ms,
        "upstream_gap_ms": args.upstream_gap_ms,
        "nice": args.nice,
    }
    report: dict[str, Any] = {"meta": meta, "settings": settings, "results": run.results, "soak": run.soak}
    report["targets"] = evaluate(run.results, run.soak)
    report["notes"] = notes(meta, run.results, run.soak, settings)
    report["resume"] = run.resumed
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    text = render(report) + ("\n" + "\n".join(resume_cost.markdown(run.resumed)) + "\n" if run.resumed else "")
    (args.out / "latest.md").write_text(text)
    sys.stdout.write(text)
    log(f"done in {meta['duration_s']} s: {args.out / 'latest.md'}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        log(f"failed: {exc}")
        sys.exit(1)

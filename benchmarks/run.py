"""The gateway's overhead benchmark, in one command (benchmarks/README.md).

    scripts/bench            # full run, about 14 minutes (200k-request soak, capped at 10 minutes)
    scripts/bench --quick    # about 3 minutes (20k-request soak)
    scripts/bench --redis    # adds a subject: the gateway with Redis-backed limits (private redis-server)

Subjects, each measured the same way against one fake upstream (``tests/fakes/upstream``, its fast front end):

* ``direct``: wrk straight at the fake upstream: the floor of this machine;
* ``yardstick``: a bare aiohttp pass-through proxy (``yardstick_proxy.py``);
* ``gateway``: ``llm-gateway serve --workers 1`` with ``gateway.yaml``, once per client dialect.

The subject runs on core 0; the fake upstream, wrk and this runner on core 1 (``taskset``). Per subject:
requests/s and latency percentiles at 1, 8 and 64 connections (wrk, closed loop), CPU µs per request of
the subject's process tree (utime+stime from /proc, children included), 64-chunk streams/s, time to
first token at concurrency 1 (aiohttp client), peak RSS (VmHWM); for the gateway also RSS growth over a
soak. Writes ``benchmarks/results/latest.json`` and ``latest.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from benchmarks import resume_cost
from benchmarks.clients import CHUNKS, DIALECTS, KEY, OPENAI, TEAM, Dialect, pacing, preflight, run_async, ttft
from benchmarks.machine import ensure_wrk, machine_meta
from benchmarks.procs import (
    BenchError,
    Cores,
    Processes,
    background_load,
    children_cpu_s,
    choose_cores,
    core_ticks,
    free_port,
    log,
    self_cpu_s,
    tree_cpu_s,
    worker_memory,
)
from benchmarks.report import evaluate, notes, render

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
VENV = ROOT / ".venv" / "bin"
PY = str(VENV / "python") if (VENV / "python").exists() else sys.executable
CONCURRENCIES = (1, 8, 64)
STREAM_CONNECTIONS = 64
ROUND_CONNECTIONS = 64  # the interleaved rounds, plain and streamed: the targets' concurrency
LATENCY_KEYS = ("c1_p50_ms", "ttft_p50_ms")  # the interleaved rounds' latency figures, per round
# Paced streams: chunks 1 ms apart, as a model writes tokens (a fast one); each read then carries one
# chunk, so the per-chunk relay cost shows. 16 streams at once stay within one core's capacity.
PACED_GAP_MS = 1.0
PACED_CONNECTIONS = 16
OPEN_LOOP_CONNECTIONS = 64  # at most; an open-loop run opens what its rate needs
SOAK_CONNECTIONS = 64
WRK_TIMEOUT_S = 5
REDIS_TIMEOUT_MS = 2000  # the --redis subject's redis.timeout_ms (``gateway_config``)


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


# --- load: wrk -----------------------------------------------------------------------------------


@dataclass
class Probe:
    """What the processes of interest and the cores did during one load run."""

    server_pid: int | None
    upstream_pid: int | None
    extra_pids: tuple[int, ...] = ()  # ours, on the load core (redis)

    def snapshot(self) -> dict[str, Any]:
        return {
            "t": time.monotonic(),
            "server": tree_cpu_s(self.server_pid),
            "upstream": tree_cpu_s(self.upstream_pid),
            "extra": sum(tree_cpu_s(p) for p in self.extra_pids),
            "children": children_cpu_s(),
            "self": self_cpu_s(),
            "cores": core_ticks(),
        }


def usage_between(a: dict[str, Any], b: dict[str, Any], cores: Cores) -> dict[str, Any]:
    wall = b["t"] - a["t"]
    server = b["server"] - a["server"]
    upstream = b["upstream"] - a["upstream"]
    load_side = upstream + (b["children"] - a["children"]) + (b["self"] - a["self"]) + (b["extra"] - a["extra"])
    out: dict[str, Any] = {"wall_s": wall, "server_cpu_s": server, "upstream_cpu_s": upstream}
    out["wrk_cpu_s"] = b["children"] - a["children"]
    out["extra_cpu_s"] = b["extra"] - a["extra"]
    busy = {}
    for core, (busy_b, total_b) in b["cores"].items():
        busy_a, total_a = a["cores"].get(core, (busy_b, total_b))
        ticks = total_b - total_a
        busy[core] = (busy_b - busy_a) / ticks if ticks else 0.0
    out["core_busy_pct"] = {str(c): round(100 * v, 1) for c, v in busy.items()}
    if cores.subject is not None and cores.load is not None and wall > 0:
        # what others (not this benchmark) ran on our cores: the machine is shared
        out["foreign_pct_subject_core"] = round(max(0.0, 100 * (busy[cores.subject] - server / wall)), 1)
        out["foreign_pct_load_core"] = round(max(0.0, 100 * (busy[cores.load] - load_side / wall)), 1)
    return out


class Load:
    def __init__(self, cores: Cores) -> None:
        self.cores = cores

    def wrk(
        self,
        url: str,
        dialect: Dialect,
        connections: int,
        seconds: int,
        probe: Probe,
        stream: bool = False,
    ) -> dict[str, Any]:
        """Closed loop: wrk keeps ``connections`` requests out."""
        env = {**os.environ, "BENCH_KEY": KEY, "BENCH_TEAM": TEAM, "BENCH_STREAM": "1" if stream else "0"}
        args = ["-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", f"{WRK_TIMEOUT_S}s"]
        cmd = self.cores.pin(self.cores.load, ["wrk", *args, "-s", str(dialect.script), url])
        run = self._run(cmd, env, seconds, probe)
        return {"connections": connections, "seconds": seconds, "stream": stream, **run}

    def open_loop(self, url: str, dialect: Dialect, rate: int, seconds: int, probe: Probe) -> dict[str, Any]:
        """Open loop: ``rate`` requests/s arrive whatever the answers do (``benchmarks/openloop.py``)."""
        args = [PY, "-m", "benchmarks.openloop", "--url", url + dialect.path, "--rate", str(rate)]
        args += ["--seconds", str(seconds), "--connections", str(OPEN_LOOP_CONNECTIONS)]
        args += ["--body", json.dumps(dialect.body(False))]
        for name, value in dialect.headers.items():
            args += ["--header", f"{name}: {value}"]
        run = self._run(self.cores.pin(self.cores.load, args), dict(os.environ), seconds, probe)
        return {"connections": OPEN_LOOP_CONNECTIONS, "seconds": seconds, "stream": False, "fixed_rate": rate, **run}

    def _run(self, cmd: list[str], env: dict[str, str], seconds: int, probe: Probe) -> dict[str, Any]:
        before = probe.snapshot()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 60, check=False)
        except subprocess.TimeoutExpired as exc:
            raise BenchError(f"the load generator did not finish: {' '.join(cmd)}") from exc
        after = probe.snapshot()
        line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
        if line is None:
            raise BenchError(f"no result ({done.returncode}): {done.stdout[-800:]} {done.stderr[-800:]}")
        raw = json.loads(line.split(" ", 1)[1])
        usage = usage_between(before, after, self.cores)
        requests = int(raw["requests"])
        lat = raw["latency_us"]
        errors = raw["errors"]
        run: dict[str, Any] = {
            "requests": requests,
            "rps": requests / (raw["duration_us"] / 1e6) if raw["duration_us"] else 0.0,
            "latency_ms": {k: round(float(lat[k]) / 1000, 3) for k in ("p50", "p90", "p99", "p999", "max", "mean")},
            "errors": sum(int(v) for v in errors.values()),
            "error_detail": errors,
            "bytes_per_response": round(raw["bytes"] / requests) if requests else 0,
            **usage,
        }
        if requests:
            run["server_cpu_us_per_req"] = (
                round(usage["server_cpu_s"] / requests * 1e6, 1) if probe.server_pid else None
            )
            run["upstream_cpu_us_per_req"] = round(usage["upstream_cpu_s"] / requests * 1e6, 1)
            if probe.extra_pids:  # redis-server: the gateway's work done in another process
                run["extra_cpu_us_per_req"] = round(usage["extra_cpu_s"] / requests * 1e6, 1)
        return run


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


# --- the gateway's config ----------------------------------------------------------------------------


def gateway_config(
    upstream_port: int,
    redis_url: str | None,
    provider: str = "openai",
    resume: str | None = None,
    queue: bool = False,
) -> str:
    """The config under test; ``provider`` and ``resume`` (on, off) set its one target's provider and
    its model's mid-stream resume switch (``benchmarks.instructions``); ``queue``: its model has a
    fair queue whose capacity the load never reaches (the cost of a free slot, docs/fair-queuing.md)."""
    text = (BENCH / "gateway.yaml").read_text()
    text = text.replace("UPSTREAM_PORT", str(upstream_port)).replace(
        "KEY_SHA256", hashlib.sha256(KEY.encode()).hexdigest()
    )
    data = yaml.safe_load(text)
    target = data["models"][0]["targets"][0]
    target["provider"] = provider
    if provider == "anthropic":  # Anthropic's base URL has no /v1: its wire's path holds it
        target["base_url"] = target["base_url"].removesuffix("/v1")
    if resume is not None:
        data["models"][0]["resume"] = resume == "on"
    if queue:
        data["models"][0]["queue"] = {"capacity": 1_000_000}
    if redis_url:
        # Not the default 50 ms per call: on this shared 2-core machine, under 64 streams, a call runs
        # past it now and then, the breaker opens for a second and the budgets (closed on failure)
        # refuse with 503, the TTFT step's among them. This measures Redis's cost, not its failure.
        data["redis"] = {"url": redis_url, "timeout_ms": REDIS_TIMEOUT_MS}
        # every limit kind, a money budget among them, far above the load: each admission runs the
        # whole script (one Redis call) and none is refused
        data["spend"] = {"currency": "USD", "prices": [{"model": "tiny", "input": 1, "output": 2}]}
        for team in data["teams"]:
            team["limits"] = {"rpm": 1_000_000_000, "tpm": 1_000_000_000_000, "concurrency": 1_000_000}
            team["budget"] = {"amount": 1_000_000_000, "tokens": 1_000_000_000_000, "period": "month"}
    return yaml.safe_dump(data, sort_keys=False)


def gateway_command(config: Path, port: int) -> list[str]:
    serve = ["serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    entry = VENV / "llm-gateway"
    if entry.exists():
        return [str(entry), *serve]
    return [PY, "-m", "gateway", *serve]


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
    load = Load(cores)
    rate = args.rate
    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    procs = Processes(tmp)
    results: list[dict[str, Any]] = []
    soak_result: dict[str, Any] = {}
    resumed: dict[str, Any] = {}
    server_logs: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        up_port = free_port()
        upstream_args = [PY, "-m", "tests.fakes.upstream", "--fast", "--port", str(up_port), "--chunks", str(CHUNKS)]
        upstream_args += ["--ttft-ms", str(args.upstream_ttft_ms), "--gap-ms", str(args.upstream_gap_ms)]
        upstream = procs.start("upstream", cores.pin(cores.load, upstream_args))
        up_url = f"http://127.0.0.1:{up_port}"
        procs.wait_http("upstream", up_url + "/health", 30)

        results.append(measure(load, profile, "direct", up_url, OPENAI, Probe(None, upstream.pid), rate, up_url))

        yard_port = free_port()
        yard_args = [PY, "-m", "benchmarks.yardstick_proxy", "--port", str(yard_port), "--upstream", up_url]
        yard = procs.start("yardstick", cores.pin(cores.subject, yard_args))
        yard_url = f"http://127.0.0.1:{yard_port}"
        procs.wait_http("yardstick", yard_url + "/health", 30)
        yard_probe = Probe(yard.pid, upstream.pid)

        # Every subject starts now and stays up (idle but in its turn) until it has been measured in
        # full: the interleaved rounds need them all at once.
        gateways: list[tuple[str, str, Probe, list[str], bool]] = []  # subject, url, probe, dialects, redis
        if not args.no_gateway:
            gw_runs: list[tuple[str, str | None, list[str]]] = [("gateway", None, args.dialect_list)]
            if args.redis:
                gw_runs.append(("gateway+redis", "redis", args.dialect_list[:1]))
            for subject, redis, dialects in gw_runs:
                extra: tuple[int, ...] = ()
                redis_url = None
                if redis:
                    if shutil.which("redis-server") is None:
                        log("--redis: redis-server is not installed (apt-get install -y redis-server); skipped")
                        continue
                    r_port = free_port()
                    r_args = ["redis-server", "--port", str(r_port), "--bind", "127.0.0.1", "--save", ""]
                    r_args += ["--appendonly", "no", "--protected-mode", "yes"]
                    r_proc = procs.start("redis", cores.pin(cores.load, r_args))
                    extra = (r_proc.pid,)
                    redis_url = f"redis://127.0.0.1:{r_port}/0"
                    deadline = time.monotonic() + 20
                    while True:
                        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", r_port), 1):
                            break
                        if time.monotonic() > deadline or r_proc.poll() is not None:
                            raise BenchError(f"redis-server did not start:\n{procs.tail('redis')}")
                        time.sleep(0.1)
                config = tmp / f"{subject}.yaml"
                config.write_text(gateway_config(up_port, redis_url, queue=args.queue))
                gw_port = free_port()
                gw = procs.start(subject, cores.pin(cores.subject, gateway_command(config, gw_port)))
                gw_url = f"http://127.0.0.1:{gw_port}"
                procs.wait_http(subject, gw_url + "/health", 60)
                gateways.append((subject, gw_url, Probe(gw.pid, upstream.pid, extra), dialects, redis is not None))

        by_name = {d.name: d for d in DIALECTS}
        columns: list[Column] = [("yardstick", yard_url, OPENAI, yard_probe)]
        for subject, gw_url, probe, dialects, _ in gateways:
            columns += [(subject, gw_url, by_name[n], probe) for n in dialects]
        direct = ("direct", up_url, OPENAI, Probe(None, upstream.pid))
        rounds = interleaved(load, profile, columns, direct) if profile.rounds else {}
        results[0]["rounds"] = rounds.get("direct/openai")

        r = measure(load, profile, "yardstick", yard_url, OPENAI, yard_probe, rate, up_url)
        results.append({**r, "rounds": rounds.get("yardstick/openai")})
        procs.stop("yardstick")

        for subject, gw_url, probe, dialects, with_redis in gateways:
            requests_before = sum(v["requests"] for k, v in rounds.items() if k.startswith(subject + "/"))
            for name in dialects:
                r = measure(load, profile, subject, gw_url, by_name[name], probe, rate, up_url)
                results.append({**r, "rounds": rounds.get(f"{subject}/{name}")})
                requests_before += sum(x["requests"] for x in r.get("runs", {}).values())
            if subject == "gateway" and soak_requests > 0:
                log(f"soak: {soak_requests} requests at {SOAK_CONNECTIONS} connections")
                guess = next((r["runs"]["c64"]["rps"] for r in results if r["subject"] == subject and "runs" in r), 0)
                soak_result = soak(load, profile, gw_url, probe, soak_requests, guess or 1000.0)
                soak_result["requests_before_soak"] = requests_before
                requests_before += soak_result["requests"]
            procs.stop(subject)
            server_logs[subject] = {
                "bytes": procs.log_bytes(subject),
                "bytes_per_request": round(procs.log_bytes(subject) / max(1, requests_before), 1),
                "error_lines": procs.count_lines(subject, '"level":"error"'),
            }
            if with_redis:
                procs.stop("redis")
        if not args.no_gateway:  # resume on and off, in the same run (benchmarks/resume_cost.py)
            resume_upstream, resume_subjects = resume_cost.start(procs, cores, tmp)
            resumed = resume_cost.rounds(load, resume_upstream, resume_subjects, profile.rounds, profile.round_s)
    finally:
        procs.stop_all()
        if args.keep_logs:
            log(f"logs and configs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    runs = [x for r in results for x in r.get("runs", {}).values()]
    # direct leaves the subject's core idle, and other work moves onto it: not interference, not counted
    subject_runs = [x for r in results if r["subject"] != "direct" for x in r.get("runs", {}).values()]
    # the interleaved rounds' runs count too: the targets are read from them
    round_subject = [v for r in results for v in (r.get("rounds") or {}).get("foreign_pct_subject_core", ())]
    round_load = [v for r in results for v in (r.get("rounds") or {}).get("foreign_pct_load_core", ())]
    meta["max_foreign_subject_core_pct"] = max(
        [*(x.get("foreign_pct_subject_core", 0.0) for x in subject_runs), *round_subject], default=0.0
    )
    meta["max_foreign_load_core_pct"] = max(
        [*(x.get("foreign_pct_load_core", 0.0) for x in runs), *round_load], default=0.0
    )
    meta["duration_s"] = round(time.monotonic() - started, 1)
    meta["server_logs"] = server_logs
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
    report: dict[str, Any] = {"meta": meta, "settings": settings, "results": results, "soak": soak_result}
    report["targets"] = evaluate(results, soak_result)
    report["notes"] = notes(meta, results, soak_result, settings)
    report["resume"] = resumed
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    text = render(report) + ("\n" + "\n".join(resume_cost.markdown(resumed)) + "\n" if resumed else "")
    (args.out / "latest.md").write_text(text)
    sys.stdout.write(text)
    log(f"done in {meta['duration_s']} s: {args.out / 'latest.md'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        log(f"failed: {exc}")
        sys.exit(1)

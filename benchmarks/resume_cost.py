"""What mid-stream resume costs a stream that does not break: two gateways in the same run, the same
``vllm`` target (the fast fake upstream in vLLM's chunk shape, with token ids when asked), one with the
model's ``resume: true``, one with ``resume: false``, measured in alternating rounds so a slow spell of
the shared machine lands on both.

Per round and subject: 64 streams at once for a few seconds (streams/s, the gateway's CPU µs per
stream), then 16 streams whose chunks come 1 ms apart, as a model writes tokens (CPU µs per stream,
and per relayed chunk). The figures are medians over the rounds and their on/off ratios. A resumable
stream asks the upstream for its token ids (so its chunks differ by them as well as by their texts),
writes them null for a client whose dialect shows none, and keeps the batches sent until it ends
(read back only at a break): that is the cost measured.

Part of every ``scripts/bench`` run; ``scripts/bench --resume-only`` runs it alone, adds the
instructions per stream of each (callgrind, where valgrind is installed), and writes
``benchmarks/results/resume.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.clients import CHUNKS, OPENAI, pacing, preflight, run_async
from benchmarks.load import Load, Probe
from benchmarks.machine import basic_meta, measured, write_report
from benchmarks.procs import PY, BenchError, Cores, Processes, choose_cores, free_port, log
from benchmarks.subjects import gateway_command, gateway_config

SUBJECTS = ("on", "off")  # the model's resume switch
STREAMS, PACED_STREAMS, PACED_GAP_MS = 64, 16, 1.0
ROUNDS, ROUND_S = 8, 3  # alone (--resume-only); within a full run: the profile's rounds and round length
FIGURES = ("stream_rps", "cpu_us_per_stream", "paced_cpu_us_per_stream", "paced_cpu_us_per_chunk", "errors")


def start(procs: Processes, cores: Cores, tmp: Path, redis_url: str | None = None) -> tuple[str, dict[str, Any]]:
    """The vLLM-shaped fake upstream and one gateway per switch: (upstream URL, switch → (URL, probe))."""
    port = free_port()
    args = [PY, "-m", "tests.fakes.upstream", "--fast", "--vllm-chunks", "--port", str(port), "--chunks", str(CHUNKS)]
    upstream = procs.start("resume-upstream", cores.pin(cores.load, args))
    up_url = f"http://127.0.0.1:{port}"
    procs.wait_http("resume-upstream", up_url + "/health", 30)
    subjects: dict[str, Any] = {}
    for switch in SUBJECTS:
        config = tmp / f"resume-{switch}.yaml"
        config.write_text(gateway_config(port, redis_url, "vllm", switch))
        gw_port = free_port()
        gw = procs.start(f"resume-{switch}", cores.pin(cores.subject, gateway_command(config, gw_port)))
        url = f"http://127.0.0.1:{gw_port}"
        procs.wait_http(f"resume-{switch}", url + "/health", 60)
        if not run_async(preflight(url, OPENAI))["ok"]:
            raise BenchError(f"the gateway with resume {switch} failed its preflight")
        subjects[switch] = (url, Probe(gw.pid, upstream.pid))
    return up_url, subjects


def rounds(load: Load, upstream: str, subjects: dict[str, Any], n: int, seconds: int) -> dict[str, Any]:
    """``n`` rounds, each subject in turn (the order alternating): the figures of each round."""
    out: dict[str, dict[str, list[float]]] = {s: {k: [] for k in FIGURES} for s in subjects}
    for i in range(n):
        log(f"resume on/off: round {i + 1} of {n}")
        order = list(subjects) if i % 2 == 0 else list(subjects)[::-1]
        for switch in order:
            url, probe = subjects[switch]
            fig = out[switch]
            run = load.wrk(url, OPENAI, STREAMS, seconds, probe, stream=True)
            before = run_async(pacing(upstream, 0.0, PACED_GAP_MS))
            try:
                paced = load.wrk(url, OPENAI, PACED_STREAMS, seconds, probe, stream=True)
            finally:
                run_async(pacing(upstream, before["ttft_ms"], before["gap_ms"]))
            fig["stream_rps"].append(round(run["rps"], 1))
            fig["cpu_us_per_stream"].append(run["server_cpu_us_per_req"])
            fig["paced_cpu_us_per_stream"].append(paced["server_cpu_us_per_req"])
            fig["paced_cpu_us_per_chunk"].append(round(paced["server_cpu_us_per_req"] / CHUNKS, 2))
            fig["errors"].append(run["errors"] + paced["errors"])
    return {"rounds": out, "medians": medians(out)}


def medians(out: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    med = {s: {k: statistics.median(v) for k, v in figs.items() if k != "errors"} for s, figs in out.items()}
    ratio = {k: round(med["on"][k] / med["off"][k], 3) for k in med["on"] if med["off"][k]}
    paired = [
        a / b for a, b in zip(out["on"]["paced_cpu_us_per_chunk"], out["off"]["paced_cpu_us_per_chunk"], strict=True)
    ]
    spread = [round(min(paired), 3), round(max(paired), 3)] if paired else []
    return {**med, "on/off": ratio, "paced_cpu_per_chunk_round_ratios": spread}


def markdown(result: dict[str, Any]) -> list[str]:
    """The section the bench reports (also the whole of ``resume.md``)."""
    med, rows = result["medians"], []
    names = {
        "stream_rps": f"streams/s ({STREAMS} at once, {CHUNKS} chunks each)",
        "cpu_us_per_stream": "gateway CPU µs per stream (unpaced)",
        "paced_cpu_us_per_stream": (
            f"gateway CPU µs per stream (chunks {PACED_GAP_MS:g} ms apart, {PACED_STREAMS} at once)"
        ),
        "paced_cpu_us_per_chunk": "gateway CPU µs per relayed chunk (paced)",
    }
    for key, name in names.items():
        rows.append(
            f"| {name} | {med['on'][key]:g} | {med['off'][key]:g} | {med['on/off'].get(key, float('nan')):.3f} |"
        )
    errors = sum(sum(v["errors"]) for v in result["rounds"].values())
    n = len(result["rounds"]["on"]["stream_rps"])
    lo, hi = med["paced_cpu_per_chunk_round_ratios"] or (float("nan"), float("nan"))
    return [
        "## Mid-stream resume: the cost to a stream that does not break",
        "",
        f"One `vllm` target (the fast fake in vLLM's chunk shape), the model's `resume` on and off, {n} "
        f"alternating rounds in the same run; medians. Errors: {errors}. Paced CPU per chunk, on/off per "
        f"round: {lo:.3f} to {hi:.3f}.",
        "",
        "| figure | resume on | resume off | on/off |",
        "|---|---:|---:|---:|",
        *rows,
    ]


INSTRUCTION_STREAMS, INSTRUCTION_WARMUP = 300, 100  # per switch, under callgrind (about 50x slower)


def instructions() -> dict[str, float]:
    """Instructions per 64-chunk stream of the gateway with resume on and off
    (``benchmarks.instructions``): the figure that repeats to within ~0.5%, where CPU time wanders."""
    counts = {}
    for switch in SUBJECTS:
        args = [PY, "-m", "benchmarks.instructions", "--stream", "--provider", "vllm", "--resume", switch]
        args += ["--no-yardstick", "--requests", str(INSTRUCTION_STREAMS), "--warmup", str(INSTRUCTION_WARMUP)]
        log(f"resume {switch}: instructions per stream under callgrind")
        done = subprocess.run(args, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            raise BenchError(f"benchmarks.instructions failed: {done.stderr[-2000:]}")
        counts[switch] = json.loads(done.stdout.strip().splitlines()[-1])["subjects"]["gateway/openai"]
    return {**counts, "on/off": round(counts["on"] / counts["off"], 4)}


def instruction_lines(counts: dict[str, float]) -> list[str]:
    per = {k: counts[k] / CHUNKS for k in SUBJECTS}
    return [
        "",
        f"Instructions (callgrind, user space, {INSTRUCTION_STREAMS} streams after {INSTRUCTION_WARMUP}, "
        f"concurrency 16): {counts['on'] / 1e6:.3f}M per stream with resume on, {counts['off'] / 1e6:.3f}M off; "
        f"per relayed chunk {per['on'] / 1e3:.1f}k vs {per['off'] / 1e3:.1f}k: on/off {counts['on/off']:.4f}.",
    ]


def run_alone(args: argparse.Namespace) -> int:
    """``scripts/bench --resume-only``: the two gateways alone; writes ``resume.{json,md}``."""
    cores = choose_cores(args.nice)
    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-resume-"))
    procs = Processes(tmp)
    try:
        upstream, subjects = start(procs, cores, tmp)
        result = rounds(Load(cores), upstream, subjects, args.rounds or ROUNDS, ROUND_S)
    finally:
        procs.stop_all()
    counted = instructions() if shutil.which("valgrind") else {}
    meta = basic_meta("scripts/bench --resume-only")
    where = (
        "" if cores.subject is None else f" Gateways on core {cores.subject}; upstream and wrk on core {cores.load}."
    )
    meta["note"] = f"{ROUND_S} s per run.{where}"
    lines = [measured(meta), "", *markdown(result), *(instruction_lines(counted) if counted else [])]
    write_report(args.out, "resume", {"meta": meta, **result, "instructions": counted}, "\n".join(lines) + "\n")
    print(json.dumps(result["medians"]))
    return 0

"""What a benchmark run records about where it ran: the machine, the tools, the commit, the pinning;
and wrk, installed from Debian's package when missing."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.procs import ROOT, BenchError, Cores, log


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() != 0:
        raise BenchError("wrk is not installed and this is not root: apt-get install -y wrk")
    log("installing wrk (Debian package)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "install", "-y", "-qq", "wrk"], ["apt-get", "update", "-qq"]):
        if subprocess.run(cmd, env=env, timeout=600, check=False).returncode == 0 and shutil.which("wrk"):
            return str(shutil.which("wrk"))
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], env=env, timeout=600, check=True)
    found = shutil.which("wrk")
    if not found:
        raise BenchError("wrk could not be installed")
    return found


def version_of(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return "absent"


def cpuidle() -> str:
    """The kernel's CPU idle driver: on a VM, ``haltpoll`` (the guest polls a while before it halts)
    makes a wake-up across cores several times cheaper, which the concurrency-1 latencies show."""
    base = Path("/sys/devices/system/cpu/cpuidle")
    try:
        driver = (base / "current_driver").read_text().strip()
        governor = (base / "current_governor_ro").read_text().strip() if (base / "current_governor_ro").exists() else ""
    except OSError:
        return "?"
    return driver + (f" ({governor})" if governor and governor != driver else "")


def write_report(out: Path, name: str, report: dict[str, Any], markdown: str) -> None:
    """``out/name.json`` (every figure) and ``out/name.md`` (the table), and the table printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{name}.md").write_text(markdown)
    print(markdown)


def measured(meta: dict[str, Any], software: str = "") -> str:
    """A results table's first line, from ``basic_meta`` and a ``note``: when, where, what was run."""
    return (
        f"Measured {meta['date']} on {meta['cpu_model']} ({meta['nproc']} cores, {meta['memory_gib']} GiB), "
        f"{software}git {meta['git']}: `{meta['command']}`. {meta['note']}"
    )


def basic_meta(command: str, watch: tuple[str, ...] = ("gateway", "adapters")) -> dict[str, Any]:
    """The date, the machine and the commit (marked when ``watch`` has uncommitted changes): what every
    results table states."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((x.split(":", 1)[1].strip() for x in cpuinfo.splitlines() if x.startswith("model name")), "?")
    mem_kib = next(
        int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")
    )
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", *watch], capture_output=True, text=True, cwd=ROOT, check=False
    ).stdout.strip()
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_gib": round(mem_kib / 1024 / 1024),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "git": (git.stdout.strip() or "?") + (f" (uncommitted changes in {' or '.join(watch)})" if dirty else ""),
    }


def machine_meta(args: argparse.Namespace, cores: Cores, background: float) -> dict[str, Any]:
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False).stdout.split(" [")[0]
    # as typed: scripts/bench adds --redis (its default) to the runner's own arguments
    command = os.environ.get("BENCH_COMMAND") or " ".join(["scripts/bench", *sys.argv[1:]])
    load_model = "closed loop at fixed concurrencies 1, 8 and 64 (wrk, one thread)" + (
        f", and open loop at {args.rate} requests/s (benchmarks/openloop.py: arrivals at a fixed rate, latency "
        "from each request's issue, so a stall is not hidden by a client that waits)."
        if args.rate
        else "; no open-loop run (--rate 0)."
    )
    if cores.subject is None:
        pinning = "none (fewer than 2 usable cores or no taskset): subject and load generator compete for CPU."
    else:
        pinning = (
            f"subject (yardstick or gateway) on core {cores.subject}; fake upstream, wrk, the open-loop client and "
            f"the runner's TTFT "
            f"client on core {cores.load}" + (" (and redis-server)" if args.redis else "") + "."
        )
    return {
        **basic_meta(command),
        "profile": "quick" if args.quick else "full",
        "nproc": cores.available,
        "aiohttp": aiohttp.__version__,
        "uvloop": version_of("uvloop"),
        "wrk": wrk_version.strip() or "wrk",
        "open_loop_rate": args.rate,
        "load_model": load_model,
        "pinning": pinning,
        "subject_core": cores.subject,
        "load_core": cores.load,
        "background_pct": round(background, 1),
        "cpuidle": cpuidle(),
    }

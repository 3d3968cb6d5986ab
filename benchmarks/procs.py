"""Processes and /proc readings the benchmarks share: start, watch and stop what a run starts; CPU
time of a process tree; memory; per-core busy time; pinning to cores."""

from __future__ import annotations

import contextlib
import math
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv" / "bin"
PY = str(VENV / "python") if (VENV / "python").exists() else sys.executable  # the project's own, where it has one
TICK = os.sysconf("SC_CLK_TCK")


def percentile(ordered: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` percent of ``ordered`` (sorted) at or below it."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def log(msg: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


class BenchError(Exception):
    pass


# --- cores ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cores:
    subject: int | None  # None: no pinning (one core, or no taskset)
    load: int | None
    available: int
    nice: int = 0

    def pin(self, core: int | None, args: list[str]) -> list[str]:
        if self.nice:
            args = ["nice", "-n", str(self.nice), *args]
        return args if core is None else ["taskset", "-c", str(core), *args]


def choose_cores(nice: int) -> Cores:
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2 or shutil.which("taskset") is None:
        return Cores(None, None, len(available), nice)
    # core 0 and core 1 on this 2-core machine; on a bigger one the first two we may use
    return Cores(available[0], available[1], len(available), nice)


# --- /proc ----------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from 3 (state) on; comm may hold spaces


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu_s(pid: int | None) -> float:
    """utime+stime of a process and its live descendants, plus what its reaped children used."""
    if pid is None:
        return 0.0
    total = 0
    for i, p in enumerate([pid, *descendants(pid)]):
        fields = _stat_fields(p)
        if fields is None:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
        if i == 0:
            total += int(fields[13]) + int(fields[14])  # cutime, cstime: children waited for
    return total / TICK


def status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def worker_memory(pid: int) -> dict[str, float]:
    """RSS of the largest process of the tree (with --workers 1: the gateway itself), in MiB."""
    procs = [pid, *descendants(pid)]
    return {
        "vmhwm_mib": max(status_kib(p, "VmHWM") for p in procs) / 1024,
        "vmrss_mib": max(status_kib(p, "VmRSS") for p in procs) / 1024,
    }


def core_ticks() -> dict[int, tuple[int, int]]:
    """Per core: (busy, total) ticks from /proc/stat."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3].isdigit():
            name, *values = line.split()
            v = [int(x) for x in values[:8]]
            idle = v[3] + v[4]
            out[int(name[3:])] = (sum(v) - idle, sum(v))
    return out


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def background_load(seconds: float = 1.0) -> float:
    """How busy the machine is before we start anything, in % of all cores."""
    a = core_ticks()
    time.sleep(seconds)
    b = core_ticks()
    busy = sum(b[c][0] - a[c][0] for c in b if c in a)
    total = sum(b[c][1] - a[c][1] for c in b if c in a)
    return 100.0 * busy / total if total else 0.0


# --- processes --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Processes:
    """Everything this run starts, each in its own session; all are stopped at the end, whatever happens."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.live: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        logfile = self.logdir / f"{name}.log"
        with logfile.open("wb") as out:
            proc = subprocess.Popen(
                args,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        self.live[name] = (proc, logfile)
        return proc

    def tail(self, name: str, lines: int = 20) -> str:
        if name not in self.live:
            return ""
        try:
            text = self.live[name][1].read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def count_lines(self, name: str, needle: str) -> int:
        count = 0
        with contextlib.suppress(OSError, KeyError), self.live[name][1].open("rb") as f:
            for line in f:
                count += needle.encode() in line
        return count

    def log_bytes(self, name: str) -> int:
        with contextlib.suppress(OSError, KeyError):
            return self.live[name][1].stat().st_size
        return 0

    def wait_http(self, name: str, url: str, timeout: float = 60.0) -> None:
        proc = self.live[name][0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BenchError(f"{name} exited with {proc.returncode} before answering {url}:\n{self.tail(name)}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                pass
            time.sleep(0.1)
        raise BenchError(f"{name} did not answer {url} within {timeout:.0f} s:\n{self.tail(name)}")

    def stop(self, name: str) -> None:
        entry = self.live.get(name)
        if entry is None:
            return
        proc = entry[0]
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        # anything left in its session (a worker that outlived its parent)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    def stop_all(self) -> None:
        for name in reversed(list(self.live)):
            try:
                self.stop(name)
            except Exception as exc:
                log(f"could not stop {name}: {exc}")

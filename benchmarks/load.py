"""Load on one subject, and what it cost: wrk's closed loop and the open-loop client
(``benchmarks/openloop.py``), each run's requests/s, latency percentiles and errors, and the CPU time
the processes of interest (``Probe``) and the two cores spent meanwhile. What to run and in which order
is the runner's (``benchmarks/run.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.clients import KEY, TEAM, Dialect
from benchmarks.procs import PY, BenchError, Cores, children_cpu_s, core_ticks, self_cpu_s, tree_cpu_s

OPEN_LOOP_CONNECTIONS = 64  # at most; an open-loop run opens what its rate needs
WRK_TIMEOUT_S = 5


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

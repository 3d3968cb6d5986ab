"""One command, three subjects, one table: direct to the fake upstream, through the bare aiohttp proxy
(the yardstick), and through the gateway with every feature on (key auth, Redis limits on a local
Redis, metrics, dialect translation) — per dialect. wrk is the load generator; the server under test
is pinned to core 0, the fake upstream and wrk to core 1.

    scripts/bench            # full run (~10 minutes)
    scripts/bench --quick    # ~2 minutes, smaller soak

Writes benchmarks/results/latest.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
KEY = "gw-bench-0123456789abcdef"
BODY = {"model": "tiny", "prompt": "Say hello", "max_tokens": 16}
DIALECTS = {
    "openai": ("/v1/completions", f"Authorization: Bearer {KEY}", "tiny"),
    "friendli": ("/serverless/v1/completions", f"Authorization: Bearer {KEY}|X-Friendli-Team: bench", "tiny"),
    "sgp": ("/v4/beta/completions", f"x-api-key: {KEY}|x-selected-account-id: bench", "openai/tiny"),
    "octoai": ("/v1/completions", f"Authorization: Bearer {KEY}|X-Fern-SDK-Name: octoai", "tiny"),
}
CONFIG = """models:
  - name: tiny
    targets:
      - {{provider: openai, base_url: "http://127.0.0.1:{up}/v1", model: tiny}}
teams:
  - id: bench
    keys: [{{id: bench-key, sha256: {digest}}}]
    limits: {{rpm: 100000000, tpm: 1000000000000, concurrency: 100000}}
redis: {{url: "redis://127.0.0.1:6379/0"}}
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, limit: float = 30) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(url)


@contextmanager
def process(args: list[str], core: int, health: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        ["taskset", "-c", str(core), *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_http(health)
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its live children (gateway workers), in seconds."""
    total = 0.0
    pids = [pid] + [
        int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    ]
    tick = os.sysconf("SC_CLK_TCK")
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    pids = [pid] + [
        int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    ]
    values = []
    for p in pids:
        m = re.search(rf"{field}:\s+(\d+)", Path(f"/proc/{p}/status").read_text())
        if m:
            values.append(int(m.group(1)))
    return max(values) if values else 0


def wrk(url: str, path: str, headers: str, body: dict[str, Any], conns: int, seconds: float) -> dict[str, Any]:
    env = {**os.environ, "BENCH_PATH": path, "BENCH_BODY": json.dumps(body), "BENCH_HEADERS": headers}
    args = ["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s"]
    args += ["-s", str(ROOT / "benchmarks" / "wrk" / "post.lua"), url]
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=seconds + 30).stdout
    line = next(line for line in out.splitlines() if line.startswith("JSON "))
    result: dict[str, Any] = json.loads(line[5:])
    result["rps"] = result["requests"] / result["seconds"]
    return result


async def ttft(url: str, path: str, headers: str, body: dict[str, Any], n: int) -> float:
    hdrs = dict(h.split(": ", 1) for h in headers.split("|"))
    samples = []
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            began = time.perf_counter()
            async with session.post(url + path, json={**body, "stream": True}, headers=hdrs) as resp:
                await resp.content.readline()
                samples.append(time.perf_counter() - began)
                await resp.read()
    samples.sort()
    return samples[len(samples) // 2]


def measure(name: str, url: str, pid: int | None, dialect: str, quick: bool) -> dict[str, Any]:
    path, headers, model = DIALECTS[dialect]
    body = {**BODY, "model": model}
    seconds = 4 if quick else 8
    out: dict[str, Any] = {"subject": name, "dialect": dialect}
    wrk(url, path, headers, body, 8, 1)  # warm-up
    for conns in (1, 8, 64):
        cpu0 = tree_cpu_seconds(pid) if pid else 0.0
        r = wrk(url, path, headers, body, conns, seconds)
        cpu = (tree_cpu_seconds(pid) - cpu0) if pid else 0.0
        out[f"c{conns}"] = {
            "rps": round(r["rps"]),
            "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000,
            "cpu_us_per_req": round(cpu / r["requests"] * 1e6, 1) if pid else None,
            "errors": r["non200"] + r["socket_errors"],
        }
    stream_body = {**body, "stream": True}
    r = wrk(url, path, headers, stream_body, 8, seconds)
    out["streams_per_s"] = round(r["rps"])
    out["ttft_ms"] = round(asyncio.run(ttft(url, path, headers, body, 50 if quick else 200)) * 1000, 3)
    if pid:
        out["rss_mib"] = round(rss_kib(pid, "VmHWM") / 1024, 1)
    return out


def soak(url: str, pid: int, requests: int) -> dict[str, float]:
    path, headers, model = DIALECTS["openai"]
    before = rss_kib(pid)
    done, began = 0, time.monotonic()
    # wrk runs by duration: repeat short rounds until the count is reached (bounded by 15 minutes)
    while done < requests and time.monotonic() - began < 900:
        done += wrk(url, path, headers, {**BODY, "model": model}, 32, 5)["requests"]
    after = rss_kib(pid)
    return {
        "requests": done,
        "rss_before_mib": before / 1024,
        "rss_after_mib": after / 1024,
        "growth_pct": round((after - before) / before * 100, 2),
    }


def table(results: list[dict[str, Any]], soak_result: dict[str, float], meta: dict[str, str]) -> str:
    lines = [f"Benchmark of {meta['date']} on {meta['machine']} (`{meta['command']}`)", ""]
    lines.append(
        "| subject | dialect | rps c1 | rps c8 | rps c64 | p50 c1 ms | p99 c64 ms | CPU µs/req c64 | streams/s"
        " | TTFT ms | peak RSS MiB |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        lines.append(
            f"| {r['subject']} | {r['dialect']} | {r['c1']['rps']} | {r['c8']['rps']} | {r['c64']['rps']} | "
            f"{r['c1']['p50_ms']:.3f} | {r['c64']['p99_ms']:.3f} | {r['c64']['cpu_us_per_req'] or '-'} | "
            f"{r['streams_per_s']} | {r['ttft_ms']:.3f} | {r.get('rss_mib', '-')} |"
        )
    direct = results[0]
    yard = results[1]
    gw = next(r for r in results if r["subject"] == "gateway" and r["dialect"] == "openai")
    checks = [
        (
            "CPU per request ≤ 1.5x yardstick (c64)",
            gw["c64"]["cpu_us_per_req"] / yard["c64"]["cpu_us_per_req"],
            1.5,
            "x",
        ),
        ("added p50 at c1 ≤ 0.5 ms", gw["c1"]["p50_ms"] - direct["c1"]["p50_ms"], 0.5, " ms"),
        ("p99 at c64 ≤ 2x yardstick's", gw["c64"]["p99_ms"] / yard["c64"]["p99_ms"], 2.0, "x"),
        ("streams/s ≥ 70% of yardstick's", gw["streams_per_s"] / yard["streams_per_s"], 0.7, "x"),
        ("added TTFT ≤ 0.5 ms", gw["ttft_ms"] - direct["ttft_ms"], 0.5, " ms"),
        ("peak RSS ≤ 100 MiB per worker", gw["rss_mib"], 100, " MiB"),
        (f"RSS growth ≤ 5% over {int(soak_result['requests'])} requests", soak_result["growth_pct"], 5, "%"),
    ]
    lines += ["", "| target | measured | goal | met |", "|---|---|---|---|"]
    for name, value, goal, unit in checks:
        met = value >= goal if "≥" in name else value <= goal
        lines.append(f"| {name} | {value:.2f}{unit} | {goal}{unit} | {'yes' if met else 'no'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if shutil.which("wrk") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    up, yard_port, gw_port = free_port(), free_port(), free_port()
    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    cfg = tmp / "gateway.yaml"
    from gateway.config import hash_key

    cfg.write_text(CONFIG.format(up=up, digest=hash_key(KEY)))
    results: list[dict[str, Any]] = []
    with process([PY, "-m", "benchmarks.fake_upstream", "--port", str(up)], 1, f"http://127.0.0.1:{up}/v1/models"):
        base = f"http://127.0.0.1:{up}"
        results.append(measure("direct", base, None, "openai", a.quick))
        yard_args = [PY, "-m", "benchmarks.yardstick_proxy", "--port", str(yard_port), "--upstream", base]
        with process(yard_args, 0, f"http://127.0.0.1:{yard_port}/v1/models") as yard:
            results.append(measure("yardstick", f"http://127.0.0.1:{yard_port}", yard.pid, "openai", a.quick))
        gw_args = [PY, "-m", "gateway", "serve", "--config", str(cfg), "--port", str(gw_port), "--workers", "1"]
        with process(gw_args, 0, f"http://127.0.0.1:{gw_port}/health") as gw:
            gw_url = f"http://127.0.0.1:{gw_port}"
            for dialect in DIALECTS:
                results.append(measure("gateway", gw_url, gw.pid, dialect, a.quick))
            soak_result = soak(gw_url, gw.pid, 20_000 if a.quick else 200_000)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        + next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "?",
        ),
        "command": "scripts/bench" + (" --quick" if a.quick else ""),
    }
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps({"meta": meta, "results": results, "soak": soak_result}, indent=2))
    text = table(results, soak_result, meta)
    (out / "latest.md").write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

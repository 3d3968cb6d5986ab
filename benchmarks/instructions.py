"""Instructions per request, counted by valgrind's callgrind: a figure that repeats to within ~0.5%
run to run, for judging one change to the hot path when CPU time on a shared VM wanders by ±10%.

The yardstick and the gateway (each dialect asked for) run under callgrind in turn, in front of the
fast fake upstream; a client on the other core sends ``--warmup`` requests, the counters are zeroed,
``--requests`` more are sent at concurrency 16, and the count is dumped. Counted: everything the
subject's process runs in user space (its threads too), not the kernel's work: syscalls count only as
the instructions around them, so ratios here run higher than ratios of CPU time. Valgrind slows the
subject about 50x: 1000 requests take about 40 s per subject.

    python -m benchmarks.instructions [--dialects openai,friendli] [--stream] [--redis] [--gap-ms 1]

``--gap-ms`` paces the upstream's chunks (a stream's reads then carry one chunk each, as a model
server's tokens come): with ``--stream``, instructions per stream of 64 relayed tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.clients import CHUNKS, DIALECTS, OPENAI, Dialect, run_async
from benchmarks.procs import BenchError, Processes, free_port, log
from benchmarks.subjects import gateway_config

PY = sys.executable
CONCURRENCY = 16


async def send(url: str, dialect: Dialect, stream: bool, count: int) -> int:
    """``count`` requests at concurrency 16; returns how many were not answered 200."""
    body = json.dumps(dialect.body(stream)).encode()
    headers = {**dialect.headers, "Content-Type": "application/json"}
    left, failed = [count], [0]
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                async with session.post(url + dialect.path, data=body, headers=headers) as resp:
                    await resp.read()
                    failed[0] += resp.status != 200

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return failed[0]


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise BenchError(f"nothing listens on port {port}") from None
            time.sleep(0.1)


def total_ir(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise BenchError(f"no instruction total in {path}")


def count(
    procs: Processes, name: str, args: list[str], url: str, dialect: Dialect, a: argparse.Namespace, out: Path
) -> float:
    """Instructions per request of one subject, started under callgrind and stopped after."""
    prefix = out / f"{name}.callgrind"
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={prefix}.%p", "--dump-instr=no"]
    proc = procs.start(name, [*valgrind, *args])
    try:
        procs.wait_http(name, url + "/health", timeout=120)
        if run_async(send(url, dialect, a.stream, a.warmup)):
            raise BenchError(f"{name}: warm-up requests failed:\n{procs.tail(name)}")
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        failed = run_async(send(url, dialect, a.stream, a.requests))
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
        if failed:
            raise BenchError(f"{name}: {failed} of {a.requests} requests failed:\n{procs.tail(name)}")
        deadline = time.monotonic() + 30
        while not (dumps := sorted(out.glob(f"{name}.callgrind.{proc.pid}.*"))):
            if time.monotonic() > deadline:
                raise BenchError(f"{name}: callgrind wrote no dump")
            time.sleep(0.2)
        time.sleep(0.5)  # the dump is written whole before the next poll in practice; be sure
        return total_ir(dumps[-1]) / int(a.requests)
    finally:
        procs.stop(name)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dialects", default="openai", help="comma-separated: openai,friendli,sgp,octoai")
    p.add_argument("--stream", action="store_true", help="64-chunk streams instead of whole answers")
    p.add_argument("--redis", action="store_true", help="the gateway with Redis-backed team limits (a private server)")
    p.add_argument("--queue", action="store_true", help="the model has a fair queue, never full (its free-slot cost)")
    p.add_argument("--no-yardstick", action="store_true")
    p.add_argument(
        "--provider",
        default="openai",
        choices=("openai", "vllm", "anthropic"),
        help="the target's provider (vllm: streams may resume; anthropic: the tests' aiohttp fake of"
        " Anthropic's wire, its natural 8-token answers, for an Anthropic client's own stream)",
    )
    p.add_argument("--resume", choices=("on", "off"), help="the model's mid-stream resume switch (default: unset)")
    p.add_argument("--gap-ms", type=float, default=0.0, help="the fake upstream's delay between chunks")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=300)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is needed (Debian's valgrind package)")
    by_name = {d.name: d for d in DIALECTS}
    dialects = [by_name[n] for n in a.dialects.split(",")]
    out = Path(tempfile.mkdtemp(prefix="gw-instr-"))
    procs = Processes(out)
    results: dict[str, Any] = {"requests": a.requests, "stream": a.stream, "subjects": {}}
    try:
        up_port = free_port()
        upstream = [PY, "-m", "tests.fakes.upstream", "--fast", "--port", str(up_port), "--chunks", str(CHUNKS)]
        if a.provider == "vllm":
            upstream.append("--vllm-chunks")
        if a.gap_ms:
            upstream += ["--gap-ms", str(a.gap_ms)]
        if a.provider == "anthropic":  # the fake's cost is not counted: only the subject runs under callgrind
            pacing = f"slow={a.gap_ms / 1000}" if a.gap_ms else "burst"
            upstream = [PY, "-m", "tests.fakes.upstream", "--kind", "anthropic", "--model", "tiny"]
            upstream += ["--port", str(up_port), "--faults", f"[[fault:{pacing}]]"]
        procs.start("upstream", upstream)
        procs.wait_http("upstream", f"http://127.0.0.1:{up_port}/health")
        redis_url = None
        if a.redis:
            redis_port = free_port()
            procs.start("redis", ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"])
            wait_port(redis_port)
            redis_url = f"redis://127.0.0.1:{redis_port}/0"
        if not a.no_yardstick:
            port = free_port()
            args = [
                PY,
                "benchmarks/yardstick_proxy.py",
                "--port",
                str(port),
                "--upstream",
                f"http://127.0.0.1:{up_port}",
            ]
            log("yardstick under callgrind")
            results["subjects"]["yardstick"] = count(
                procs, "yardstick", args, f"http://127.0.0.1:{port}", OPENAI, a, out
            )
        config = out / "gateway.yaml"
        config.write_text(gateway_config(up_port, redis_url, a.provider, a.resume, a.queue))
        for dialect in dialects:
            port = free_port()
            args = [PY, "-m", "gateway", "serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
            log(f"gateway ({dialect.name}) under callgrind")
            url = f"http://127.0.0.1:{port}"
            results["subjects"][f"gateway/{dialect.name}"] = count(
                procs, "gateway", [*args, "--workers", "1"], url, dialect, a, out
            )
    finally:
        procs.stop_all()
    base = results["subjects"].get("yardstick")
    kind = "stream" if a.stream else "request"
    for name, ir in results["subjects"].items():
        ratio = f"  {ir / base:.2f}x the yardstick" if base else ""
        print(f"{name:20s} {ir / 1e6:7.3f}M instructions per {kind}{ratio}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

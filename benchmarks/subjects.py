"""The subjects the overhead benchmark measures, started and left running for the runner: the fake
upstream (``tests/fakes/upstream``, its fast front end), the yardstick proxy, and the gateway under test
(its config, built from ``gateway.yaml``, and its command line), with a private ``redis-server`` for the
``--redis`` subject. Each is pinned to its core; how they are measured is ``benchmarks/run.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.clients import CHUNKS, KEY
from benchmarks.load import Probe
from benchmarks.procs import PY, VENV, BenchError, Cores, Processes, free_port, log

BENCH = Path(__file__).resolve().parent
REDIS_TIMEOUT_MS = 2000  # the --redis subject's redis.timeout_ms (``gateway_config``)


@dataclass(frozen=True)
class Upstream:
    port: int
    url: str
    pid: int


@dataclass(frozen=True)
class Gateway:
    """A started gateway subject: the dialects it is measured in, and whether Redis holds its limits."""

    subject: str
    url: str
    probe: Probe
    dialects: list[str]
    redis: bool


def start_upstream(procs: Processes, cores: Cores, args: argparse.Namespace) -> Upstream:
    port = free_port()
    upstream_args = [PY, "-m", "tests.fakes.upstream", "--fast", "--port", str(port), "--chunks", str(CHUNKS)]
    upstream_args += ["--ttft-ms", str(args.upstream_ttft_ms), "--gap-ms", str(args.upstream_gap_ms)]
    upstream = procs.start("upstream", cores.pin(cores.load, upstream_args))
    url = f"http://127.0.0.1:{port}"
    procs.wait_http("upstream", url + "/health", 30)
    return Upstream(port, url, upstream.pid)


def start_yardstick(procs: Processes, cores: Cores, upstream: Upstream) -> tuple[str, Probe]:
    port = free_port()
    yard = procs.start(
        "yardstick",
        cores.pin(
            cores.subject, [PY, "-m", "benchmarks.yardstick_proxy", "--port", str(port), "--upstream", upstream.url]
        ),
    )
    url = f"http://127.0.0.1:{port}"
    procs.wait_http("yardstick", url + "/health", 30)
    return url, Probe(yard.pid, upstream.pid)


def start_gateways(
    procs: Processes, cores: Cores, tmp: Path, upstream: Upstream, args: argparse.Namespace
) -> list[Gateway]:
    """Every gateway subject the arguments ask for, up together: the interleaved rounds need them all
    at once, and each stays up until it has been measured in full."""
    if args.no_gateway:
        return []
    runs: list[tuple[str, bool, list[str]]] = [("gateway", False, args.dialect_list)]
    if args.redis:
        runs.append(("gateway+redis", True, args.dialect_list[:1]))
    gateways = []
    for subject, with_redis, dialects in runs:
        extra: tuple[int, ...] = ()
        redis_url = None
        if with_redis:
            if shutil.which("redis-server") is None:
                log("--redis: redis-server is not installed (apt-get install -y redis-server); skipped")
                continue
            redis_url, redis_pid = start_redis(procs, cores)
            extra = (redis_pid,)
        config = tmp / f"{subject}.yaml"
        config.write_text(gateway_config(upstream.port, redis_url, queue=args.queue))
        port = free_port()
        gw = procs.start(subject, cores.pin(cores.subject, gateway_command(config, port)))
        url = f"http://127.0.0.1:{port}"
        procs.wait_http(subject, url + "/health", 60)
        gateways.append(Gateway(subject, url, Probe(gw.pid, upstream.pid, extra), dialects, with_redis))
    return gateways


def start_redis(procs: Processes, cores: Cores) -> tuple[str, int]:
    """A private redis-server on the load core, answering: (its URL, its pid)."""
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--protected-mode", "yes"]
    proc = procs.start("redis", cores.pin(cores.load, args))
    deadline = time.monotonic() + 20
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            raise BenchError(f"redis-server did not start:\n{procs.tail('redis')}")
        time.sleep(0.1)
    return f"redis://127.0.0.1:{port}/0", proc.pid


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

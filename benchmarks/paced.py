"""Capacity for real LLM pacing: many long-lived streams that carry one token per event at a fixed
rate, through the gateway, through the bare yardstick proxy, and straight to the upstream:

    scripts/bench-paced            # about 10 minutes on 2 cores
    scripts/bench-paced --quick    # a smoke run: 50 streams for 5 s per subject (under a minute)

The upstream is the fake's fast front end (``python -m tests.fakes.upstream --fast``), one token per
SSE event every ``1 / rate`` seconds. Two scenarios, each run against direct, yardstick and gateway
(``--workers 1``) in turn:

* ``cpu``: ``--cpu-streams`` streams (1000) at ``--cpu-rate`` tokens/s (20): the subject's CPU per
  relayed token (its process tree's CPU over the measured window, over the tokens the client got in it);
* ``scale``: ``--streams`` (1000, 5000, 10000) streams at 1 token/s: RSS per stream (the subject's
  RSS with the streams open, less its RSS before), open file descriptors, and the inter-token delay the
  subject adds (its p50/p99 gap between events less direct's, at the client).

Streams are opened over ``--ramp`` seconds, measured for ``--seconds``, then closed by the client.
``--scaling`` adds (or with ``--scaling-only`` runs only) the multi-worker figures: requests/s and CPU
per request of the gateway at 1 and 2 workers (``--workers-list``), closed loop over keep-alive
connections, non-streaming answers. Writes ``benchmarks/results/paced.json`` and ``paced.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import resource
import sys
import tempfile
import time
from array import array
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.machine import basic_meta, measured, write_report
from benchmarks.openloop import Connection
from benchmarks.procs import (
    TICK,
    Processes,
    core_ticks,
    descendants,
    free_port,
    log,
    percentile,
    self_cpu_s,
    status_kib,
    tree_cpu_s,
)
from gateway.runtime.config import hash_key
from gateway.web.listener import connections_for
from tests.redis_servers import RedisServer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
KEY = "gw-bench-paced-0123456789"
SUBJECTS = ("direct", "yardstick", "gateway")
SETTLE_BOUND = 60.0  # seconds after the ramp for every stream to have a token
MAX_STREAM_TOKENS = 2000  # the fake model's context (2,048 tokens) less the prompt's
# Streams opened per second by default: on 2 cores a proxy that opens more falls behind its accept
# queue (the 4,096 backlog) while the client, the fake and the proxy share the cores.
OPEN_RATE = 330.0


# --- the streaming client --------------------------------------------------------------------------


@dataclass
class Window:
    """What the client saw between ``start`` and ``end`` (perf_counter seconds)."""

    start: float = math.inf
    end: float = math.inf
    tokens: int = 0
    opened: int = 0
    failed: int = 0
    stalled: int = 0  # open and never failed, yet no token in the window (``stalled``)
    going: int = 0  # opened streams that have had a token or failed
    ramp: float = 0.0  # seconds the opens took: longer than asked when connects waited
    settle: float = 0.0  # seconds after the opens until every stream had a token or failed
    others: float = 0.0  # cores busy in the window outside the client, the fake and the subject

    def __post_init__(self) -> None:
        self.gaps = array("d")  # seconds between a stream's events, inside the window
        self.settled = asyncio.Event()  # every opened stream is going

    def went(self) -> None:
        self.going += 1
        if self.opened and self.going >= self.opened:
            self.settled.set()


class PacedStream(asyncio.Protocol):
    """One streamed request; every SSE event in the window counts, and the gap since the last one."""

    def __init__(self, request: bytes, window: Window) -> None:
        self.request = request
        self.window = window
        self.last = 0.0
        self.transport: asyncio.Transport | None = None
        self.head = True
        self.failed = False
        self.counted = False  # a token of it arrived inside the window

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def fail(self) -> None:
        if not self.failed:
            self.failed = True
            self.window.failed += 1
            if not self.last:
                self.window.went()

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        w = self.window
        if self.head:
            self.head = False
            if not data.startswith(b"HTTP/1.1 200"):
                self.fail()
                return
        if b"data: [DONE]" in data and now < w.end:
            self.fail()  # the answer ended before the window did: too short for a stretched ramp
        events = data.count(b"data: {")
        if not events:
            return
        if not self.last and not self.failed:
            w.went()
        if w.start <= now <= w.end:
            self.counted = True
            w.tokens += events
            if self.last:
                w.gaps.append(now - self.last)
        self.last = now

    def connection_lost(self, exc: Exception | None) -> None:
        if time.perf_counter() < self.window.end:
            self.fail()  # ended before the window did: the stream was too short or cut


def stream_request(port: int, path: str, headers: dict[str, str], body: dict[str, Any]) -> bytes:
    raw = json.dumps(body).encode()
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join([*lines, f"Content-Length: {len(raw)}", "", ""])).encode() + raw


async def hold_streams(
    port: int, request: bytes, streams: int, ramp: float, seconds: float, pid: int | None, fake: int = 0
) -> Any:
    """Opens ``streams`` over ``ramp`` seconds, measures for ``seconds``, closes them all; ``pid`` is the
    subject's (0: direct), ``fake`` the upstream's."""
    loop = asyncio.get_running_loop()
    window = Window()
    transports: list[asyncio.BaseTransport] = []
    protocols: list[PacedStream] = []

    async def open_stream() -> None:
        try:
            transport, protocol = await loop.create_connection(lambda: PacedStream(request, window), "127.0.0.1", port)
        except OSError:
            window.failed += 1
            return
        transports.append(transport)
        protocols.append(protocol)

    # Each open is its own task, on time whatever the others do: awaited in turn, one SYN the subject's
    # full accept queue dropped held back every later open for the 1 s retransmit, and the catch-up
    # burst that followed overflowed the queue again.
    began = time.perf_counter()
    opening = []
    for i in range(streams):
        due = began + ramp * i / streams
        if due > time.perf_counter():
            await asyncio.sleep(due - time.perf_counter())
        opening.append(asyncio.create_task(open_stream()))
    await asyncio.gather(*opening)
    window.opened = len(transports)
    window.ramp = time.perf_counter() - began
    # The window opens once every stream carries tokens: a subject still taking in the ramp's
    # connections (a backlog of 4096 can hold seconds of them) would have its catch-up measured as
    # delay. Bounded, so one that never gets there shows its stalled streams.
    if window.going >= window.opened:
        window.settled.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(window.settled.wait(), SETTLE_BOUND)
    window.settle = time.perf_counter() - began - window.ramp
    await asyncio.sleep(max(1.0, ramp / 4))  # late tokens of the busiest seconds drain
    cpu_before = tree_cpu_s(pid) if pid else 0.0
    others_before = others_cpu_s(pid or 0, fake)
    window.start = time.perf_counter()
    window.end = window.start + seconds
    await asyncio.sleep(seconds / 2)
    held = {"rss_kib": tree_kib(pid), "fds": tree_fds(pid)} if pid else {}
    await asyncio.sleep(window.end - time.perf_counter())
    cpu = tree_cpu_s(pid) - cpu_before if pid else 0.0
    window.others = (others_cpu_s(pid or 0, fake) - others_before) / seconds
    window.stalled = stalled(protocols)
    for t in transports:
        t.abort()
    return window, cpu, held


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """The client is the instrument: a full collection walking 10k open streams (up to 320 ms seen on a
    busy machine) would show as the subject's delay. What the hold leaves in cycles goes after it."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def stalled(streams: list[PacedStream]) -> int:
    """Streams open the whole window that carried no token in it: a proxy out of descriptors or
    stuck holds them without failing them, and only tokens/s would show it otherwise."""
    return sum(1 for s in streams if not s.failed and not s.counted)


def others_cpu_s(*ours: int) -> float:
    """CPU seconds the machine has spent outside this client and the process trees ``ours``: other work
    on a shared machine, which delays what is measured here (a core it takes is felt in gap p99)."""
    busy = sum(b for b, _ in core_ticks().values()) / TICK
    return busy - self_cpu_s() - sum(tree_cpu_s(p) for p in ours if p)


def listen_drops() -> int:
    """SYNs the kernel dropped since boot because a listener's accept queue was full (all listeners:
    during a run, the subject's). Each costs its client a 1 s retransmit."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        names, values = (line.split() for line in Path("/proc/net/netstat").read_text().splitlines()[:2])
        return int(values[names.index("ListenDrops")])
    return 0


def tree_kib(pid: int) -> int:
    return sum(status_kib(p, "VmRSS") for p in [pid, *descendants(pid)])


def tree_fds(pid: int) -> int:
    total = 0
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{p}/fd"))
    return total


# --- the subjects ----------------------------------------------------------------------------------


def gateway_config(upstream: int, port: int, redis: str | None = None) -> dict[str, Any]:
    target = {"provider": "vllm", "base_url": f"http://127.0.0.1:{upstream}/v1", "model": "tiny"}
    # Streams of minutes, and every stream from this one client address.
    target["timeouts"] = {"total": 3600, "idle": 120}
    config = {
        "server": {"host": "127.0.0.1", "port": port, "max_connections_per_client": 0},
        "models": [{"name": "tiny", "targets": [target]}],
        "teams": [{"id": "bench", "keys": [{"id": "k", "sha256": hash_key(KEY)}]}],
    }
    return config | ({"redis": {"url": redis}} if redis else {})


def start_subject(
    procs: Processes, name: str, upstream: int, tmp: Path, workers: int = 1, redis: str | None = None
) -> tuple[int, int]:
    """(port, pid) of a subject in front of the fake on ``upstream``; direct is the fake itself. Several
    gateway workers need ``redis`` (for keys and limits; no limit is configured here)."""
    if name == "direct":
        return upstream, 0
    port = free_port()
    if name == "yardstick":
        args = ["-m", "benchmarks.yardstick_proxy", "--port", str(port), "--upstream", f"http://127.0.0.1:{upstream}"]
    else:
        config = tmp / "gateway.yaml"
        config.write_text(yaml.safe_dump(gateway_config(upstream, port, redis)))
        args = ["-m", "gateway", "serve", "--config", str(config), "--workers", str(workers), "--log-format", "json"]
    proc = procs.start(name, [sys.executable, *args], env=dict(os.environ))
    procs.wait_http(name, f"http://127.0.0.1:{port}/health")  # the yardstick asks the fake
    return port, proc.pid


def start_fake(procs: Processes, chunks: int, gap_ms: float) -> int:
    port = free_port()
    args = ["-m", "tests.fakes.upstream", "--fast", "--port", str(port), "--chunks", str(chunks)]
    procs.start("fake", [sys.executable, *args, "--gap-ms", str(gap_ms)], env=dict(os.environ))
    procs.wait_http("fake", f"http://127.0.0.1:{port}/health")
    return port


def run_streams(streams: int, rate: float, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One scenario: the same paced streams against every subject in turn."""
    procs = Processes(tmp)
    ramp = ramp_for(streams, args)
    chunks = stream_tokens(rate, ramp, args.seconds)
    out: dict[str, Any] = {}
    try:
        fake = start_fake(procs, chunks, 1000 / rate)
        for name in SUBJECTS:
            port, pid = start_subject(procs, name, fake, tmp)
            path = "/v1/completions"
            headers = {"Authorization": f"Bearer {KEY}"} if name == "gateway" else {}
            body = {"model": "tiny", "prompt": "Say hello", "max_tokens": chunks, "stream": True}
            request = stream_request(port, path, headers, body)
            idle = tree_kib(pid) if pid else 0
            drops = listen_drops()
            fake_pid = procs.live["fake"][0].pid
            with collections_paused():
                window, cpu, held = asyncio.run(hold_streams(port, request, streams, ramp, args.seconds, pid, fake_pid))
            gaps = sorted(window.gaps)
            r: dict[str, Any] = {
                "streams": window.opened,
                "failed": window.failed,
                "stalled": window.stalled,
                "ramp_s": round(window.ramp, 1),
                "settle_s": round(window.settle, 1),
                "listen_drops": listen_drops() - drops,
                "others_cores": round(window.others, 2),
                "tokens_per_s": round(window.tokens / args.seconds, 1),
                "gap_p50_ms": round(percentile(gaps, 50) * 1000, 2) if gaps else None,
                "gap_p99_ms": round(percentile(gaps, 99) * 1000, 2) if gaps else None,
            }
            if pid:
                r["cpu_us_per_token"] = round(cpu / window.tokens * 1e6, 2) if window.tokens else None
                r["rss_mib"] = round(held["rss_kib"] / 1024, 1)
                r["rss_kib_per_stream"] = round((held["rss_kib"] - idle) / max(1, window.opened), 1)
                r["fds"] = held["fds"]
            out[name] = r
            log(f"{streams} streams x {rate:g} tok/s, {name}: {r}")
            if name != "direct":
                procs.stop(name)
    finally:
        procs.stop_all()
    for name in ("yardstick", "gateway"):
        for q in ("p50", "p99"):
            d, s = out["direct"][f"gap_{q}_ms"], out[name][f"gap_{q}_ms"]
            out[name][f"added_{q}_ms"] = round(s - d, 2) if d is not None and s is not None else None
    return out


# --- multi-worker scaling --------------------------------------------------------------------------


async def closed_loop(port: int, request: bytes, connections: int, seconds: float) -> int:
    """Requests answered in ``seconds`` by ``connections`` keep-alive connections, each sending its next
    request as soon as the last is answered."""
    loop = asyncio.get_running_loop()
    answered = 0
    end = time.perf_counter() + seconds

    def done(conn: Connection, issued: float, status: int, size: int) -> None:
        nonlocal answered
        answered += status == 200
        if not conn.lost and time.perf_counter() < end:
            conn.send(time.perf_counter())

    conns = [
        (await loop.create_connection(lambda: Connection(request, done), "127.0.0.1", port))[1]
        for _ in range(connections)
    ]
    for c in conns:
        c.send(time.perf_counter())
    await asyncio.sleep(seconds + 0.5)
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    return answered


def _client(port: int, request: bytes, connections: int, seconds: float) -> int:
    return asyncio.run(closed_loop(port, request, connections, seconds))


def load(port: int, request: bytes, args: argparse.Namespace) -> int:
    """The closed loop from ``--client-procs`` processes: one Python client saturates about one core."""
    if args.client_procs == 1:
        return _client(port, request, args.connections, args.scaling_seconds)
    each = max(1, args.connections // args.client_procs)
    with ProcessPoolExecutor(args.client_procs) as pool:
        runs = [pool.submit(_client, port, request, each, args.scaling_seconds) for _ in range(args.client_procs)]
        return sum(r.result() for r in runs)


def run_scaling(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    procs = Processes(tmp)
    out: dict[str, Any] = {}
    redis = RedisServer().start()  # every run with it, one worker too: the same footing
    try:
        fake = start_fake(procs, 16, 0.0)
        for workers in args.workers_list:
            port, pid = start_subject(procs, "gateway", fake, tmp, workers, redis.url)
            body = {"model": "tiny", "prompt": "Say hello", "max_tokens": 16}
            request = stream_request(port, "/v1/completions", {"Authorization": f"Bearer {KEY}"}, body)
            asyncio.run(closed_loop(port, request, args.connections, 1.0))  # warm-up
            before = tree_cpu_s(pid)
            answered = load(port, request, args)
            cpu = tree_cpu_s(pid) - before
            out[str(workers)] = {
                "requests_s": round(answered / args.scaling_seconds, 1),
                "cpu_us_per_request": round(cpu / answered * 1e6, 1) if answered else None,
                "cpu_cores_busy": round(cpu / args.scaling_seconds, 2),
            }
            log(f"{workers} worker(s): {out[str(workers)]}")
            procs.stop("gateway")
    finally:
        procs.stop_all()
        redis.close()
    return out


# --- the report ------------------------------------------------------------------------------------


def cell(v: Any, suffix: str = "") -> str:
    return "n/a" if v is None else f"{v:g}{suffix}"


def render(report: dict[str, Any]) -> str:
    lines = [
        measured(report["meta"]),
        "",
        "| scenario | subject | streams | ramp + settle | SYN drops | others' CPU | failed | stalled | tokens/s "
        "| CPU per token | RSS | RSS per stream | fds | gap p50 | gap p99 | added p99 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for label, scenario in report["scenarios"].items():
        for name in SUBJECTS:
            r = scenario[name]
            lines.append(
                f"| {label} | {name} | {r['streams']} | {cell(r.get('ramp_s'))} + {cell(r.get('settle_s'), ' s')} | "
                f"{cell(r.get('listen_drops'))} | {cell(r.get('others_cores'), ' cores')} | {r['failed']} | "
                f"{r.get('stalled', '-')} | {r['tokens_per_s']} | "
                f"{cell(r.get('cpu_us_per_token'), ' µs')} | {cell(r.get('rss_mib'), ' MiB')} | "
                f"{cell(r.get('rss_kib_per_stream'), ' KiB')} | {cell(r.get('fds'))} | "
                f"{cell(r['gap_p50_ms'], ' ms')} | "
                f"{cell(r['gap_p99_ms'], ' ms')} | {cell(r.get('added_p99_ms'), ' ms')} |"
            )
        g, y = scenario["gateway"], scenario["yardstick"]
        if g.get("cpu_us_per_token") and y.get("cpu_us_per_token"):
            verdicts.append(
                f"* {label}: gateway CPU per relayed token {g['cpu_us_per_token'] / y['cpu_us_per_token']:.2f}x the "
                f"yardstick's (goal <= 1.5x at 1k streams x 20 tok/s); added inter-token delay p99 "
                f"{cell(g['added_p99_ms'], ' ms')} (goal <= 5 ms at 10k streams x 1 tok/s); RSS "
                f"{cell(g['rss_mib'], ' MiB')} (goal <= 1024 MiB at 10k streams)."
            )
    if report.get("scaling"):
        lines += ["", "| gateway workers | requests/s | CPU per request | cores busy |", "|---:|---:|---:|---:|"]
        for workers, r in report["scaling"].items():
            lines.append(
                f"| {workers} | {r['requests_s']} | {cell(r['cpu_us_per_request'], ' µs')} | {r['cpu_cores_busy']} |"
            )
    return "\n".join([*lines, "", *verdicts, ""])


def stream_tokens(rate: float, ramp: float, seconds: float) -> int:
    """Tokens per stream: it outlasts the window, within the fake model's context (a longer answer is
    refused, and every stream would fail); a settle so slow that streams end first shows as failed."""
    return min(math.ceil(rate * (ramp * 1.25 + SETTLE_BOUND + seconds + 10)), MAX_STREAM_TOKENS)


def ramp_for(streams: int, args: argparse.Namespace) -> float:
    """``--ramp``, or at least 10 s and at most ``OPEN_RATE`` opens a second."""
    return float(args.ramp) if args.ramp is not None else max(10.0, streams / OPEN_RATE)


def raise_descriptors(want: int) -> int:
    """Every stream holds a descriptor in the client, two in a proxy and one in the upstream: the soft
    limit (inherited by the subjects) goes as high as allowed; raising the hard one needs privilege.
    Returns the hard limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for soft in (max(want, hard), hard):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, soft))
            return soft
    return hard


def streams_that_fit(hard: int) -> int:
    """The most streams a proxy can hold under the hard descriptor limit (a client and an upstream
    socket each, and the gateway's reserve: ``server.max_connections``'s default), in hundreds."""
    return connections_for(hard) // 100 * 100


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench-paced", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a smoke run: 50 streams, 5 s per subject")
    p.add_argument("--streams", default="1000,5000,10000", help="the scale scenario's stream counts (comma list)")
    p.add_argument("--cpu-streams", type=int, default=1000, help="the cpu scenario's streams (default 1000)")
    p.add_argument("--cpu-rate", type=float, default=20.0, help="the cpu scenario's tokens/s per stream (default 20)")
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per subject (default 30)")
    p.add_argument(
        "--ramp",
        type=float,
        help=f"seconds over which streams are opened (default: 10, or streams / {OPEN_RATE:g} if longer)",
    )
    p.add_argument("--scaling", action="store_true", help="add requests/s and CPU per request at 1 and 2 workers")
    p.add_argument("--scaling-only", action="store_true", help="run only the multi-worker figures")
    p.add_argument("--workers-list", default="1,2", help="gateway workers for --scaling (default 1,2)")
    p.add_argument("--connections", type=int, default=32, help="--scaling's keep-alive connections (default 32)")
    p.add_argument("--client-procs", type=int, default=1, help="--scaling's client processes (default 1)")
    p.add_argument("--scaling-seconds", type=float, default=15.0, help="--scaling's seconds per run (default 15)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where paced.json and paced.md go")
    args = p.parse_args(argv)
    if args.quick:
        args.streams, args.cpu_streams, args.seconds, args.ramp, args.scaling_seconds = "50", 50, 5.0, 1.0, 3.0
    args.stream_counts = [int(n) for n in args.streams.split(",") if n]
    args.workers_list = [int(n) for n in args.workers_list.split(",") if n]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    hard = raise_descriptors(max(4 * max(args.stream_counts, default=0) + 1024, 4096))
    scenarios: dict[str, Any] = {}
    scaling: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-paced-") as tmp:
        if not args.scaling_only:
            label = f"cpu: {args.cpu_streams} x {args.cpu_rate:g} tok/s"
            scenarios[label] = run_streams(args.cpu_streams, args.cpu_rate, args, Path(tmp))
            for asked in args.stream_counts:
                n = min(asked, streams_that_fit(hard))
                label = f"scale: {n} x 1 tok/s" + (f" ({asked} asked; descriptor limit {hard})" if n < asked else "")
                scenarios[label] = run_streams(n, 1.0, args, Path(tmp))
        if args.scaling or args.scaling_only:
            scaling = run_scaling(args, Path(tmp))
    meta = {
        **basic_meta(" ".join(["scripts/bench-paced", *sys.argv[1:]])),
        "note": ("A `--quick` smoke run: too few requests, too short, for figures to quote. " if args.quick else "")
        + (
            "The fake upstream (fast front end) writes one token per SSE event; streams opened over "
            + (f"{args.ramp:g} s " if args.ramp is not None else f"10 s or at {OPEN_RATE:g} a second if longer ")
            + f"and measured for {args.seconds:g} s per subject; gateway with 1 worker, no limits, "
            "no per-client connection cap; "
            f"processes unpinned. Scaling: closed loop, {args.connections} keep-alive connections from "
            f"{args.client_procs} client process(es), non-streaming 16-token answers, {args.scaling_seconds:g} s."
        ),
    }
    report = {"meta": meta, "scenarios": scenarios, "scaling": scaling}
    write_report(args.out, "paced", report, render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

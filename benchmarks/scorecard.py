"""The fault-injection scorecard: what a client gets when its upstream breaks, one row per fault and
setup, one column per outcome, counted over every dialect's client.

Each fault is injected by the fake upstream (``tests/fakes/upstream/faults.py``) into the first
target; the setups are ``pair`` (a second vLLM target that can continue), ``alone`` (nothing to go
on to) and ``openai`` (a second target of OpenAI's API, which cannot continue). Each answer is read
the way its client reads it and judged against an unbroken run of the same greedy request:

* rescued exact: it ended as complete, with the unbroken run's text, finish and usage;
* rescued with gap: it ended as complete, but its text differs (a token lost or repeated);
* clean error: it ended with the dialect's error (in-band for a stream, an error status otherwise);
* false ending: it ended as complete with the answer cut short;
* hang: no end within ``--patience`` seconds.

Run: ``.venv/bin/python -m benchmarks.scorecard`` (about a minute; in process, loopback only). It
writes ``benchmarks/results/scorecard.{json,md}``. ``--vllm`` adds the real-vLLM rows: two ``vllm
serve`` replicas of the tiny CPU model in one pool, a greedy 300-token stream per dialect whose replica
is SIGKILLed, or SIGSTOPped past the idle deadline, past its 50th token (the rig
of ``tests/vllm/test_vllm_resume.py``; about 10 more minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import tempfile
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from benchmarks.machine import basic_meta, measured, write_report
from benchmarks.procs import ROOT
from gateway.web.app import create_app
from tests.fakes import upstream as fake
from tests.integration.conftest import config, target
from tests.integration.dialect_clients import STREAMING, Ingress, Reading, read_stream, read_whole

CLIENTS = STREAMING
OUTCOMES = ("rescued exact", "rescued with gap", "clean error", "false ending", "hang")
TIMEOUTS = {"connect": 1, "first_byte": 5, "idle": 0.5, "total": 30, "ttft": 0.5}
PROMPT = "tell me a story"


@dataclass(frozen=True)
class Fault:
    name: str
    marker: str
    stream: bool = True


FAULTS = (
    Fault("reset mid-stream", "reset_after=3"),
    Fault("stall mid-stream", "stall_after=3"),
    Fault("error event mid-stream", "error_after=3"),
    Fault("no first token", "first_token=3600"),
    Fault("slow first token", "first_token=2"),
    Fault("5xx before the first byte", "status=503"),
    Fault("429 with Retry-After", "status=429,retry_after=1"),
    Fault("truncated whole body", "truncate", stream=False),
)
SETUPS = {
    "pair": "a second vLLM target, which can continue",
    "alone": "no second target",
    "openai": "a second target of OpenAI's API, which cannot continue",
}
# the real-vLLM rows (``--vllm``): the signal its replica gets mid-stream
VLLM_FAULTS = {
    "replica SIGKILLed mid-stream (real vLLM)": signal.SIGKILL,
    "replica SIGSTOPped mid-stream (real vLLM)": signal.SIGSTOP,
}
VLLM_SETUP = "replicas"
VLLM_SETUP_SAYS = "two real vLLM replicas (CPU, tiny model) in one pool, 300 greedy tokens, the fault after 50"
VLLM_PATIENCE = 180.0  # seconds: 300 tokens on a CPU engine, and a continuation after a 3 s stall


def judge(got: Reading | None, want: Reading) -> str:
    if got is None:
        return "hang"
    if not got.complete:
        return "clean error" if got.error else "false ending"  # neither: an end that claims nothing, cut
    if got.text == want.text and got.usage == want.usage:
        return "rescued exact"
    return "false ending" if want.text.startswith(got.text) else "rescued with gap"


async def ask(
    session: aiohttp.ClientSession, url: str, ingress: Ingress, stream: bool, patience: float
) -> Reading | None:
    path, headers, body = ingress.request("m", PROMPT, stream, max_tokens=16, temperature=0)
    try:
        async with asyncio.timeout(patience):
            async with session.post(url + path, json=body, headers=headers) as resp:
                raw = await resp.read()
    except TimeoutError:
        return None
    return read_stream(ingress, raw) if stream and resp.status == 200 else read_whole(resp.status, raw)


async def serve(cfg: Any) -> TestServer:
    server = TestServer(create_app(cfg), host="127.0.0.1")
    await server.start_server()
    return server


async def row(session: aiohttp.ClientSession, fault: Fault, setup: str, patience: float) -> dict[str, str]:
    """Each dialect's outcome for ``fault`` in ``setup``, on fresh upstreams and a fresh gateway."""
    broken = await fake.start("vllm", faults=f"[[fault:{fault.marker}]]")
    second = await fake.start("openai" if setup == "openai" else "vllm")
    healthy = await fake.start("vllm")
    servers = []
    try:
        reference = await serve(config([{"name": "m", "targets": [target(healthy, "vllm")]}]))
        servers.append(reference)
        targets = [target(broken, "vllm", weight=1e6, timeouts=TIMEOUTS)]
        if setup != "alone":
            targets.append(target(second, setup if setup == "openai" else "vllm", weight=1e-6))
        gateway = await serve(config([{"name": "m", "targets": targets}]))
        servers.append(gateway)
        outcomes = {}
        for ingress in CLIENTS:
            want = await ask(session, str(reference.make_url("")), ingress, fault.stream, patience)
            assert want is not None and want.complete and want.text, f"the unbroken run failed for {ingress.name}"
            got = await ask(session, str(gateway.make_url("")), ingress, fault.stream, patience)
            outcomes[ingress.name] = judge(got, want)
        return outcomes
    finally:
        for s in servers:
            await s.close()
        for f in (broken, second, healthy):
            await f.close()


async def vllm_rows(session: aiohttp.ClientSession, logs: Path) -> list[dict[str, Any]]:
    """The real-vLLM rows: each dialect's unbroken answer, then the same with the replica signalled."""
    from tests.vllm import resume_rig as rig
    from tests.vllm import server

    def start(log: Path, env: dict[str, str] | None) -> AbstractContextManager[server.VLLM]:
        server.ensure_env()
        return server.running_vllm(log, env=env)

    rows, wants = [], {}
    with rig.replica_pair(logs, start) as replicas:
        for fault, sig in VLLM_FAULTS.items():
            outcomes, resumed = {}, {}
            for ingress in CLIENTS:
                async with rig.gateway(replicas) as (url, breakers):
                    if ingress.name not in wants:
                        wants[ingress.name] = await rig.read(session, url, ingress)
                    try:
                        async with asyncio.timeout(VLLM_PATIENCE):
                            got, came, n = await rig.broken(session, url, breakers, ingress, sig)
                    except TimeoutError:
                        got, came, n = None, True, 0
                assert came, f"{ingress.name}: the answer ended before the fault"
                outcomes[ingress.name], resumed[ingress.name] = judge(got, wants[ingress.name]), n
            row = {"fault": fault, "marker": sig.name, "setup": VLLM_SETUP, "outcomes": outcomes, "resumes": resumed}
            rows.append(row)
            print(f"{fault:44} {dict(Counter(outcomes.values()))}", flush=True)
    return rows


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    dialects = [i.name for i in CLIENTS]
    lines = [
        measured(meta),
        "",
        "| fault | setup | " + " | ".join(OUTCOMES) + " | by dialect (" + ", ".join(dialects) + ") |",
        "|---|---|" + "---:|" * len(OUTCOMES) + "---|",
    ]
    for r in rows:
        counts = Counter(r["outcomes"].values())
        by = ", ".join(r["outcomes"][d] for d in dialects)
        lines.append(f"| {r['fault']} | {r['setup']} | " + " | ".join(str(counts[o]) for o in OUTCOMES) + f" | {by} |")
    false_endings = sum(Counter(r["outcomes"].values())["false ending"] for r in rows)
    hangs = sum(Counter(r["outcomes"].values())["hang"] for r in rows)
    described = {**SETUPS, **({VLLM_SETUP: VLLM_SETUP_SAYS} if any(r["setup"] == VLLM_SETUP for r in rows) else {})}
    setups = "; ".join(f"`{k}`: {v}" for k, v in described.items())
    lines += ["", f"False endings: {false_endings}; hangs: {hangs}. Setups: {setups}."]
    return "\n".join(lines) + "\n"


async def main(args: argparse.Namespace) -> None:
    logging.disable(logging.WARNING)  # the gateway's warnings of every injected fault
    rows = []
    async with aiohttp.ClientSession() as session:
        for fault in FAULTS:
            for setup in SETUPS:
                outcomes = await row(session, fault, setup, args.patience)
                rows.append({"fault": fault.name, "marker": fault.marker, "setup": setup, "outcomes": outcomes})
                print(f"{fault.name:28} {setup:7} {dict(Counter(outcomes.values()))}", flush=True)
        if args.vllm:
            with tempfile.TemporaryDirectory(prefix="scorecard-vllm-") as logs:
                rows += await vllm_rows(session, Path(logs))
    meta = basic_meta("python -m benchmarks.scorecard" + (" --vllm" if args.vllm else ""))
    meta["note"] = (
        "Each dialect's client (greedy, 16 tokens; chat for openai-chat and anthropic, Responses for "
        "responses, completions for the others) against the fake upstream's vLLM stand-in "
        f"with the fault injected into the first target; timeouts {TIMEOUTS}; hang = no end within "
        f"{args.patience:g} s."
    )
    if args.vllm:
        meta["note"] += (
            f" Real-vLLM rows: {VLLM_SETUP_SAYS}, idle deadline 3 s, judged against the same dialect's "
            f"unbroken run; hang = no end within {VLLM_PATIENCE:g} s."
        )
    write_report(ROOT / "benchmarks" / "results", "scorecard", {"meta": meta, "rows": rows}, markdown(meta, rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--patience", type=float, default=20.0, help="seconds before an answer counts as a hang")
    parser.add_argument("--vllm", action="store_true", help="add the real-vLLM rows (SIGKILL, SIGSTOP mid-stream)")
    asyncio.run(main(parser.parse_args()))

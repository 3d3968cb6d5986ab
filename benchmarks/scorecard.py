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
writes ``benchmarks/results/scorecard.{json,md}``. The real-vLLM rows (a replica SIGKILLed and one
SIGSTOPped mid-stream) are ``tests/vllm/test_vllm_resume.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from benchmarks.machine import basic_meta, measured, write_report
from benchmarks.procs import ROOT
from gateway.web.app import create_app
from tests.fakes import upstream as fake
from tests.integration.conftest import config, target
from tests.integration.dialect_clients import INGRESSES, KEY, Ingress, frames


@dataclass(frozen=True)
class ChatIngress(Ingress):
    """A chat client: OpenAI's chat completions, or Anthropic's Messages."""

    def request(self, model: str, prompt: str, stream: bool, **fields: Any) -> tuple[str, dict[str, str], Any]:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], **fields, "stream": stream}
        if stream and self.name == "openai-chat":
            body["stream_options"] = {"include_usage": True}
        return self.path, {"Content-Type": "application/json", **self.headers}, body


CLIENTS = [
    *INGRESSES,
    ChatIngress("openai-chat", "/v1/chat/completions", {"Authorization": f"Bearer {KEY}"}, {}),
    ChatIngress("anthropic", "/v1/messages", {"x-api-key": KEY, "anthropic-version": "2023-06-01"}, {}),
]
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


@dataclass
class Reading:
    """What a client made of an answer."""

    complete: bool  # a normal finish, and the terminator where the dialect has one
    error: bool
    text: str
    usage: Any


def read_stream(ingress: Ingress, raw: bytes) -> Reading:
    text, finish, error, done, usage = "", False, False, False, None
    for data in frames(raw):
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        if "error" in chunk or chunk.get("object") == "error" or chunk.get("event") == "error":
            error = True
        kind = chunk.get("type")  # Anthropic's named events
        if kind == "content_block_delta":
            text += chunk["delta"].get("text") or ""
        elif kind == "message_delta":
            finish, usage = bool(chunk["delta"].get("stop_reason")), chunk.get("usage")
        elif kind == "message_stop":
            done = True
        if chunk.get("event") == "token_sampled":
            text += chunk["text"]
        if chunk.get("event") == "complete":
            finish = True
            usage = chunk.get("usage")
            continue
        for c in chunk.get("choices") or ():
            text += c.get("text") or (c.get("delta") or {}).get("content") or ""
            finish = finish or bool(c.get("finish_reason"))
        usage = chunk.get("usage") or usage
    complete = finish and not error and (done or not ingress.done)
    return Reading(complete, error, text, usage)


def read_whole(status: int, raw: bytes) -> Reading:
    if status != 200:
        return Reading(False, True, "", None)
    body = json.loads(raw)
    if "content" in body:  # Anthropic's message
        text = "".join(b.get("text") or "" for b in body["content"])
        return Reading(bool(body.get("stop_reason")), False, text, body.get("usage"))
    choice = body["choices"][0]
    text = choice.get("text") or (choice.get("message") or {}).get("content") or ""
    return Reading(bool(choice.get("finish_reason")), False, text, body.get("usage"))


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
    setups = "; ".join(f"`{k}`: {v}" for k, v in SETUPS.items())
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
    meta = basic_meta("python -m benchmarks.scorecard")
    meta["note"] = (
        "Each dialect's client (greedy, 16 tokens; chat for openai-chat and anthropic, completions for the "
        "others) against the fake upstream's vLLM stand-in "
        f"with the fault injected into the first target; timeouts {TIMEOUTS}; hang = no end within "
        f"{args.patience:g} s."
    )
    write_report(ROOT / "benchmarks" / "results", "scorecard", {"meta": meta, "rows": rows}, markdown(meta, rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--patience", type=float, default=20.0, help="seconds before an answer counts as a hang")
    asyncio.run(main(parser.parse_args()))

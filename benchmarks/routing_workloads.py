"""The routing benchmark's client: what it sends through the gateways, per workload, and what it
records (``benchmarks/routing.py`` starts the processes, counts and reports). Every phase has its own
tag at the start of every prompt, so no phase finds another's blocks cached.

* ``system``: ``--clients`` clients send questions under ``--systems`` shared system prompts of
  ``--system-words`` words; half of the clients send an ``X-Session-Id`` of their own, half none.
* ``documents``: the same with ``--documents`` long documents of ``--document-words`` words (agents'
  instructions, a retrieved file), a short question after each: by default as many documents as fill
  three quarters of the replicas' caches together (``documents_for``), more than one replica holds.
* ``chat``: multi-turn conversations, each turn the whole transcript so far plus a new question; half
  of the conversations send a session id.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import aiohttp

from benchmarks.procs import BenchError
from benchmarks.vllm_serve import chunks

KEY = "gw-bench-routing-0123456789"
WORDS = ("river", "stone", "light", "paper", "window", "garden", "silver", "morning", "thunder", "quiet", "harbor")
PROBES = 5  # pairs of prompts that time what a cache hit saves
DOCUMENTS_FILL = 0.75  # of the replicas' caches together: more than one holds, room to split them


@dataclass
class Phase:
    """One workload under one strategy: what was sent and what came back."""

    prompts: list[str] = field(default_factory=list)  # in the order they were sent
    ttft: list[float] = field(default_factory=list)
    tokens: int = 0
    wall: float = 0.0


Workload = Callable[[aiohttp.ClientSession, list[str], str, str, Any], Awaitable[Phase]]


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def shared_texts(kind: str, tag: str, count: int, n_words: int) -> list[str]:
    """The shared prefixes of one phase: the same shape for every strategy, only the tag differs."""
    rng = random.Random(1)
    return [f"{tag} {kind} {k}: {words(rng, n_words)}" for k in range(count)]


def shared_prefixes(name: str, tag: str, args: Any) -> list[str]:
    """A shared-prompt workload's prefixes: ``--systems`` system prompts or ``--documents`` documents."""
    if name == "system":
        return shared_texts("system", tag, args.systems, args.system_words)
    return shared_texts("document", tag, args.documents, args.document_words)


def documents_for(replicas: int, capacity: int, document_blocks: int) -> int:
    """How many documents of ``document_blocks`` full blocks fill ``DOCUMENTS_FILL`` of ``replicas``
    caches of ``capacity`` blocks: with two replicas or more, more than one cache holds."""
    return max(2, int(DOCUMENTS_FILL * replicas * capacity / max(1, document_blocks)))


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


async def shared_workload(
    session: aiohttp.ClientSession, gateways: list[str], model: str, tag: str, args: Any, texts: list[str]
) -> Phase:
    """Questions under a few shared prefixes, the gateways in turn."""
    phase = Phase()
    turn = iter(range(10**9))

    async def client(c: int) -> None:
        crng = random.Random(100 + c)
        sid = f"{tag}-client-{c}" if c % 2 == 0 else None
        for _ in range(args.requests // args.clients):
            prompt = f"{crng.choice(texts)}\nQuestion: {words(crng, 8)}?\nAnswer:"
            await send(session, gateways[next(turn) % len(gateways)], model, prompt, sid, args, phase)

    began = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(args.clients)))
    phase.wall = time.perf_counter() - began
    return phase


async def system_workload(
    session: aiohttp.ClientSession, gateways: list[str], model: str, tag: str, args: Any
) -> Phase:
    return await shared_workload(session, gateways, model, tag, args, shared_prefixes("system", tag, args))


async def documents_workload(
    session: aiohttp.ClientSession, gateways: list[str], model: str, tag: str, args: Any
) -> Phase:
    return await shared_workload(session, gateways, model, tag, args, shared_prefixes("documents", tag, args))


async def chat_workload(session: aiohttp.ClientSession, gateways: list[str], model: str, tag: str, args: Any) -> Phase:
    phase = Phase()

    async def conversation(c: int) -> None:
        rng = random.Random(200 + c)
        sid = f"{tag}-chat-{c}" if c % 2 == 0 else None
        transcript = f"{tag} conversation {c}. System: {words(rng, args.system_words // 2)}\n"
        for t in range(args.turns):
            transcript += f"User: {words(rng, 8)}?\nAssistant:"
            answer = await send(session, gateways[(c + t) % len(gateways)], model, transcript, sid, args, phase)
            transcript += answer + "\n"

    began = time.perf_counter()
    conversations = args.requests // args.turns
    for start in range(0, conversations, args.clients):  # at most --clients conversations at a time
        await asyncio.gather(*(conversation(c) for c in range(start, min(conversations, start + args.clients))))
    phase.wall = time.perf_counter() - began
    return phase


WORKLOADS: dict[str, Workload] = {
    "system": system_workload,
    "documents": documents_workload,
    "chat": chat_workload,
}
SHARED = ("system", "documents")  # the workloads the hit-rate goals are for


async def prefill_probe(session: aiohttp.ClientSession, replica: str, model: str, text: str) -> dict[str, float]:
    """What a cache hit saves on one idle replica, straight to vLLM: the median time to first token of
    a prompt never seen (``text`` tagged anew each time) against the same prompt again with another
    question: five pairs after one not counted, as the median of three moved by 2x between two runs.
    Under load the queue adds to both; this is the part routing can save."""
    cold: list[float] = []
    hit: list[float] = []
    for i in range(PROBES + 1):
        prefix = f"[probe {i}] {text}"
        for question, into in ((f"{i} first", cold), (f"{i} second", hit)):
            body = {"model": model, "prompt": f"{prefix}\nQuestion: {question}?\nAnswer:", "max_tokens": 1}
            began = time.perf_counter()
            first: float | None = None
            async for chunk in chunks(session, replica + "/v1/completions", {}, body | {"stream": True}):
                first = first or (time.perf_counter() - began if chunk.get("choices") else None)
            if first is None:
                raise BenchError(f"{replica}: a stream without choices")
            into.append(first)
    return {"cold_ms": round(median(cold[1:]) * 1000, 1), "hit_ms": round(median(hit[1:]) * 1000, 1)}

"""What the runner's own clients send and measure: each dialect's request (the same as
``benchmarks/wrk/<name>.lua``), and the aiohttp client's preflight and time-to-first-token probes."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.procs import BenchError, percentile

WRK_DIR = Path(__file__).resolve().parent / "wrk"
KEY = "gw-bench-0123456789abcdef"
TEAM = "team1"
CHUNKS = 64  # content chunks per stream: the fake upstream is started with them, the preflight wants them


# --- dialects: the same requests as benchmarks/wrk/<name>.lua, for the aiohttp client ---------------


@dataclass(frozen=True)
class Dialect:
    name: str
    path: str
    headers: dict[str, str]
    model: str
    stream_extra: dict[str, Any] = field(default_factory=dict)
    chat: bool = False  # a chat request (messages) instead of a completion (prompt)
    api: str = "completion"  # or "responses" (input, max_output_tokens), "embeddings" (input, no stream)

    @property
    def streams(self) -> bool:
        """The dialect has streamed answers: stream runs and TTFT are measured (not for embeddings)."""
        return self.api != "embeddings"

    @property
    def script(self) -> Path:
        return WRK_DIR / f"{self.name}.lua"

    def body(self, stream: bool) -> dict[str, Any]:
        if self.api == "embeddings":
            return {"model": self.model, "input": "Say hello"}
        if self.api == "responses":
            return {"model": self.model, "input": "Say hello", "max_output_tokens": 16} | (
                {"stream": True} if stream else {}
            )
        body: dict[str, Any] = {"model": self.model, "max_tokens": 16}
        if self.chat:
            body["messages"] = [{"role": "user", "content": "Say hello"}]
        else:
            body["prompt"] = "Say hello"
        if stream:
            body |= {"stream": True, **self.stream_extra}
        return body


USAGE = {"stream_options": {"include_usage": True}}
DIALECTS = (
    Dialect("openai", "/v1/completions", {"Authorization": f"Bearer {KEY}"}, "tiny", USAGE),
    Dialect(
        "friendli",
        "/serverless/v1/completions",
        {"Authorization": f"Bearer {KEY}", "X-Friendli-Team": TEAM},
        "tiny",
        USAGE,
    ),
    Dialect("sgp", "/v4/beta/completions", {"x-api-key": KEY}, "openai/tiny"),
    Dialect("octoai", "/v1/completions", {"Authorization": f"Bearer {KEY}", "X-Fern-SDK-Name": "octoai"}, "tiny"),
    # The path most clients use: the same OpenAI dialect's chat endpoint.
    Dialect("openai-chat", "/v1/chat/completions", {"Authorization": f"Bearer {KEY}"}, "tiny", USAGE, chat=True),
    # Anthropic's Messages: the same chat, answered in its shape (its streams always carry usage).
    Dialect("anthropic", "/v1/messages", {"x-api-key": KEY, "anthropic-version": "2023-06-01"}, "tiny", chat=True),
    # OpenAI's Responses: to the OpenAI target's own /v1/responses, its events relayed one by one.
    Dialect("responses", "/v1/responses", {"Authorization": f"Bearer {KEY}"}, "tiny", api="responses"),
    # Embeddings: an embedding model's target (no streams: its stream and TTFT figures are left out).
    Dialect("embeddings", "/v1/embeddings", {"Authorization": f"Bearer {KEY}"}, "tiny-embed", api="embeddings"),
)
OPENAI = DIALECTS[0]


# --- aiohttp client: preflight and time to first token --------------------------------------------


async def preflight(url: str, dialect: Dialect) -> dict[str, Any]:
    """One plain and one streamed request: the subject answers this dialect, or it is not measured."""
    out: dict[str, Any] = {"ok": False}
    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(url + dialect.path, json=dialect.body(False), headers=dialect.headers) as resp:
            text = await resp.text()
            out["status"] = resp.status
            out["sample"] = text[:300]
            if resp.status != 200:
                out["error"] = f"HTTP {resp.status}: {text[:300]}"
                return out
            try:
                answer = json.loads(text)
                # Anthropic's: content blocks; Responses': output items; embeddings': data
                choices = answer.get("choices") or answer.get("content") or answer.get("output") or answer.get("data")
            except ValueError:
                choices = None
            if not choices:
                out["error"] = f"answer without choices: {text[:300]}"
                return out
        if not dialect.streams:
            out["ok"] = True
            return out
        async with session.post(url + dialect.path, json=dialect.body(True), headers=dialect.headers) as resp:
            events = []
            while line := await resp.content.readline():
                if line.startswith(b"data:"):
                    events.append(line[5:].strip())
            out["stream_status"] = resp.status
            out["stream_events"] = len(events)
            out["stream_done"] = bool(events) and events[-1] == b"[DONE]"
            out["stream_usage"] = any(b'"usage"' in e and b'"usage":null' not in e for e in events)
            if resp.status != 200 or len(events) < CHUNKS:
                out["error"] = f"stream: HTTP {resp.status}, {len(events)} data events (want ≥ {CHUNKS})"
                return out
    out["ok"] = True
    return out


async def ttft(url: str, dialect: Dialect, samples: int) -> dict[str, Any]:
    """Sequential streamed requests (concurrency 1): time to the response head, to the first ``data:``
    event, and to the end of the stream. Not a throughput figure: the client's own cost is the same for
    every subject and cancels out of the 'added' numbers."""
    head, first, last = [], [], []
    timeout = aiohttp.ClientTimeout(total=15)
    connector = aiohttp.TCPConnector(limit=1)
    body = json.dumps(dialect.body(True)).encode()
    headers = {**dialect.headers, "Content-Type": "application/json"}
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for i in range(samples + 10):  # 10 warm-up requests, not kept
            began = time.perf_counter()
            async with session.post(url + dialect.path, data=body, headers=headers) as resp:
                t_head = time.perf_counter()
                t_first = None
                text = b""
                while line := await resp.content.readline():
                    if t_first is None and line.startswith(b"data:"):
                        t_first = time.perf_counter()
                    text = text or (line if resp.status != 200 else b"")
                t_last = time.perf_counter()
                if resp.status != 200 or t_first is None:  # the answer says why (e.g. limits_unavailable)
                    raise BenchError(f"TTFT request failed: HTTP {resp.status} {text[:300].decode(errors='replace')}")
            if i >= 10:
                head.append(t_head - began)
                first.append(t_first - began)
                last.append(t_last - began)

    def ms(values: list[float]) -> dict[str, float]:
        return {
            "p50": round(statistics.median(values) * 1000, 3),
            "p90": round(percentile(sorted(values), 90) * 1000, 3),
            "p99": round(percentile(sorted(values), 99) * 1000, 3),
        }

    return {"samples": samples, "head_ms": ms(head), "first_token_ms": ms(first), "stream_end_ms": ms(last)}


async def pacing(upstream: str, ttft_ms: float, gap_ms: float) -> dict[str, float]:
    """Sets how the fake upstream paces the streams that follow; returns the pacing it replaced."""
    body = {"ttft_ms": ttft_ms, "gap_ms": gap_ms}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.post(upstream + "/bench/pacing", json=body) as resp,
    ):
        if resp.status != 200:
            raise BenchError(f"the fake upstream refused its pacing: HTTP {resp.status} {await resp.text()}")
        before: dict[str, float] = await resp.json()
        return before


def run_async(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)

"""A scripted inference pool for the fair-sharing benchmark (``benchmarks/fair.py``): at most
``capacity`` requests are served at once, the rest wait in its own first-come queue (as vLLM's
scheduler holds requests past ``--max-num-seqs``), and each served request streams ``tokens`` tokens
``gap_ms`` apart after ``prefill_ms``: a request's first token waits for its queue, as on a full pool.

    python -m benchmarks.fair_pool --port 0 --capacity 4 --tokens 16 --gap-ms 25 --prefill-ms 25

prints ``READY <base url>``. OpenAI wire: ``POST /v1/completions`` and ``/v1/chat/completions``
(streamed or not), ``GET /v1/models``, ``GET /health``, and vLLM's gauges on ``GET /metrics``
(``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``). A client
that hangs up while queued leaves the queue (vLLM aborts it). The team of a request is the first word
of its prompt (``team=NAME ...``). ``GET /bench/stats``: the peak number served at once, and per team
the requests served, aborted, and their service start/end times; ``POST /bench/reset`` clears them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

MODEL = "tiny"


class Slots:
    """``capacity`` slots handed out first come, first served; a waiter that is cancelled leaves."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.running = 0
        self.waiting = 0
        self.peak = 0
        self.peak_waiting = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self) -> None:
        if self.running < self.capacity:  # then no one waits: release() hands a freed slot on
            self._take()
            return
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        self.waiting += 1
        self.peak_waiting = max(self.peak_waiting, self.waiting)
        try:
            await waiter  # resolved by release(), which has taken the slot for us
        except asyncio.CancelledError:
            if waiter.cancelled():
                self.waiting -= 1  # left the queue; release() skips its future
            else:
                self.release()  # the slot came as we were cancelled: hand it on
            raise

    def _take(self) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)

    def release(self) -> None:
        self.running -= 1
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                self.waiting -= 1
                self._take()
                waiter.set_result(None)
                return


@dataclass
class Pool:
    slots: Slots
    tokens: int
    gap_s: float
    prefill_s: float
    served: collections.Counter[str] = field(default_factory=collections.Counter)
    aborted: collections.Counter[str] = field(default_factory=collections.Counter)
    spans: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: collections.defaultdict(list))
    # per request that names itself (``#N`` last in its prompt): N, team, and the wall-clock times it
    # arrived, took a slot, sent its first token and ended (``benchmarks.fair_trace``)
    log: list[tuple[int, str, float, float, float, float]] = field(default_factory=list)


POOL = web.AppKey("pool", Pool)


def team_of(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if prompt is None:
        messages = body.get("messages") or [{}]
        prompt = messages[-1].get("content", "")
    first = str(prompt).split(" ", 1)[0]
    return first[5:] if first.startswith("team=") else "?"


def serial_of(body: dict[str, Any]) -> int | None:
    """The request's number, when its prompt ends with ``#N`` (the benchmark's load numbers them)."""
    prompt = body.get("prompt")
    if prompt is None:
        messages = body.get("messages") or [{}]
        prompt = messages[-1].get("content", "")
    last = str(prompt).rsplit(" ", 1)[-1]
    return int(last[1:]) if last.startswith("#") and last[1:].isdigit() else None


def chunk(chat: bool, i: int, last: bool) -> bytes:
    finish = "length" if last else None
    if chat:
        choice: dict[str, Any] = {"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": f" t{i}", "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    event = {"id": "cmpl-pool", "object": obj, "created": 0, "model": MODEL, "choices": [choice]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def usage(n: int) -> dict[str, int]:
    return {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}


async def complete(request: web.Request) -> web.StreamResponse:
    pool = request.app[POOL]
    body = await request.json()
    chat = request.path.endswith("/chat/completions")
    team = team_of(body)
    n = min(int(body.get("max_tokens") or pool.tokens), pool.tokens)
    arrived, first = time.time(), 0.0
    try:
        await pool.slots.acquire()
    except asyncio.CancelledError:
        pool.aborted[team] += 1
        raise
    started = time.time()
    try:
        await asyncio.sleep(pool.prefill_s)
        if not body.get("stream"):
            await asyncio.sleep(pool.gap_s * (n - 1))
            return web.json_response(answer(chat, n))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            if i:
                await asyncio.sleep(pool.gap_s)
            await resp.write(chunk(chat, i, i == n - 1))
            first = first or time.time()
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = {"id": "cmpl-pool", "object": "text_completion", "model": MODEL, "choices": [], "usage": usage(n)}
            await resp.write(b"data: " + json.dumps(tail).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        pool.served[team] += 1
        ended = time.time()
        pool.spans[team].append((started, ended))
        if (serial := serial_of(body)) is not None:
            pool.log.append((serial, team, arrived, started, first, ended))
        return resp
    except asyncio.CancelledError:
        pool.aborted[team] += 1
        raise
    finally:
        pool.slots.release()


def answer(chat: bool, n: int) -> dict[str, Any]:
    text = "".join(f" t{i}" for i in range(n))
    if chat:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
    else:
        choice = {"index": 0, "text": text}
    choice["finish_reason"] = "length"
    obj = "chat.completion" if chat else "text_completion"
    return {"id": "cmpl-pool", "object": obj, "created": 0, "model": MODEL, "choices": [choice], "usage": usage(n)}


async def metrics(request: web.Request) -> web.Response:
    s = request.app[POOL].slots
    label = f'{{model_name="{MODEL}"}}'
    lines = [
        f"vllm:num_requests_running{label} {s.running}",
        f"vllm:num_requests_waiting{label} {s.waiting}",
        f"vllm:kv_cache_usage_perc{label} {s.running / s.capacity}",
        f"vllm:gpu_cache_usage_perc{label} {s.running / s.capacity}",
    ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


async def stats(request: web.Request) -> web.Response:
    pool = request.app[POOL]
    s = pool.slots
    return web.json_response(
        {
            "capacity": s.capacity,
            "peak_running": s.peak,
            "peak_waiting": s.peak_waiting,
            "running": s.running,
            "waiting": s.waiting,
            "served": dict(pool.served),
            "aborted": dict(pool.aborted),
            "spans": pool.spans,
            "log": pool.log,
        }
    )


async def reset(request: web.Request) -> web.Response:
    pool = request.app[POOL]
    pool.slots.peak = pool.slots.running
    pool.slots.peak_waiting = pool.slots.waiting
    pool.served.clear()
    pool.aborted.clear()
    pool.spans.clear()
    pool.log.clear()
    return web.json_response({})


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "pool"}]})


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(capacity: int, tokens: int, gap_ms: float, prefill_ms: float) -> web.Application:
    app = web.Application()
    app[POOL] = Pool(Slots(capacity), tokens, gap_ms / 1000, prefill_ms / 1000)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/bench/stats", stats)
    app.router.add_post("/bench/reset", reset)
    return app


async def serve(args: argparse.Namespace) -> None:
    # handler_cancellation: a client that hangs up leaves the queue, as vLLM aborts a request
    runner = web.AppRunner(
        make_app(args.capacity, args.tokens, args.gap_ms, args.prefill_ms), handler_cancellation=True
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096)
    await site.start()
    port = runner.addresses[0][1]
    print(f"READY http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--capacity", type=int, default=4, help="requests served at once (default 4)")
    p.add_argument("--tokens", type=int, default=16, help="tokens per answer at most (default 16)")
    p.add_argument("--gap-ms", type=float, default=25.0, help="between tokens (default 25)")
    p.add_argument("--prefill-ms", type=float, default=25.0, help="before the first token (default 25)")
    args = p.parse_args(argv)
    try:
        import uvloop

        run: Any = uvloop.run
    except ImportError:
        run = asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(args))


if __name__ == "__main__":
    main()

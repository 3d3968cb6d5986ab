"""A fast fake OpenAI-compatible upstream for the overhead benchmark.

A raw asyncio protocol (uvloop when installed) speaking just enough HTTP/1.1: keep-alive, bodies by
``Content-Length`` or chunked, answers with ``Content-Length`` or chunked SSE. Every answer is rendered
once and cached, so the upstream costs a few microseconds per request and the subject in front of it
(yardstick proxy or gateway) dominates what is measured.

    POST /v1/completions, /v1/chat/completions
        non-streaming: one fixed answer in OpenAI's shape, with ``usage``
        ``"stream": true``: ``--chunks`` chunks ``data: {...}``, then a usage chunk if
        ``stream_options.include_usage``, then ``data: [DONE]``; ``--ttft-ms`` before the first chunk,
        ``--gap-ms`` between chunks (0 and 0: the whole stream in one write)
    GET /v1/models, GET /health
    POST /bench/pacing ``{"ttft_ms": 0, "gap_ms": 1}``: the benchmark runner paces the streams that
        follow (answers with the pacing it replaced, for the runner to put back)

Not a faithful OpenAI (``n``, logprobs, tools are ignored); the tests have faithful stand-ins.

    python -m benchmarks.fake_upstream --port 9000 --chunks 64 --ttft-ms 0 --gap-ms 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import signal
from dataclasses import dataclass
from typing import Any, cast

CREATED = 1700000000
PROMPT_TOKENS = 5
ANSWER = "hello from the fake upstream"
ANSWER_TOKENS = 6
MAX_HEAD = 64 * 1024
MAX_BODY = 8 * 1024 * 1024
CACHE_LIMIT = 256

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _head(status: int, content_type: bytes, extra: bytes, close: bool) -> bytes:
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%s\r\n" % (
        status,
        REASONS.get(status, "OK").encode(),
        content_type,
        extra,
        b"Connection: close\r\n" if close else b"",
    )


def whole(status: int, body: bytes, close: bool = False) -> bytes:
    """A complete response with Content-Length."""
    return _head(status, b"application/json", b"Content-Length: %d\r\n" % len(body), close) + body


def error(status: int, message: str, close: bool = False) -> bytes:
    return whole(status, _dumps({"error": {"message": message, "type": "invalid_request_error"}}), close)


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


SSE_HEAD = b"Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"


def sse_head(close: bool) -> bytes:
    return b"HTTP/1.1 200 OK\r\n%s%s\r\n" % (SSE_HEAD, b"Connection: close\r\n" if close else b"")


def event(obj: Any) -> bytes:
    return http_chunk(b"data: " + _dumps(obj) + b"\n\n")


DONE = http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Stream:
    """A streamed answer: the frames (each already an HTTP chunk) and the tail (usage, [DONE], end)."""

    frames: tuple[bytes, ...]
    tail: bytes
    joined: bytes  # frames + tail in one piece, for the no-delay case


class Answers:
    """Renders answers once per (operation, model, usage) and keeps them (bounded)."""

    def __init__(self, chunks: int) -> None:
        self.chunks = chunks
        self._whole: dict[tuple[bool, str], bytes] = {}
        self._streams: dict[tuple[bool, str, bool], Stream] = {}

    def completion(self, chat: bool, model: str) -> bytes:
        key = (chat, model)
        hit = self._whole.get(key)
        if hit is None:
            usage = {
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": ANSWER_TOKENS,
                "total_tokens": PROMPT_TOKENS + ANSWER_TOKENS,
            }
            if chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
                obj: dict[str, Any] = {"id": "chatcmpl-bench", "object": "chat.completion"}
            else:
                choice = {"index": 0, "text": " " + ANSWER, "logprobs": None, "finish_reason": "stop"}
                obj = {"id": "cmpl-bench", "object": "text_completion"}
            obj |= {"created": CREATED, "model": model, "system_fingerprint": "fp_bench", "choices": [choice]}
            obj["usage"] = usage
            hit = _dumps(obj)
            if len(self._whole) >= CACHE_LIMIT:
                self._whole.clear()
            self._whole[key] = hit
        return hit

    def stream(self, chat: bool, model: str, usage: bool) -> Stream:
        key = (chat, model, usage)
        hit = self._streams.get(key)
        if hit is None:
            hit = self._render_stream(chat, model, usage)
            if len(self._streams) >= CACHE_LIMIT:
                self._streams.clear()
            self._streams[key] = hit
        return hit

    def _render_stream(self, chat: bool, model: str, usage: bool) -> Stream:
        base: dict[str, Any] = {
            "id": "chatcmpl-bench" if chat else "cmpl-bench",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_bench",
        }
        frames = []
        for i in range(self.chunks):
            finish = "length" if i == self.chunks - 1 else None
            if chat:
                delta: dict[str, Any] = {"content": f" w{i}"}
                if i == 0:
                    delta = {"role": "assistant", **delta}
                choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": f" w{i}", "logprobs": None, "finish_reason": finish}
            frames.append(event({**base, "choices": [choice]}))
        tail = b""
        if usage:
            counts = {
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": self.chunks,
                "total_tokens": PROMPT_TOKENS + self.chunks,
            }
            tail += event({**base, "choices": [], "usage": counts})
        tail += DONE
        return Stream(tuple(frames), tail, b"".join(frames) + tail)


MODELS = _dumps(
    {"object": "list", "data": [{"id": "tiny", "object": "model", "created": CREATED, "owned_by": "bench"}]}
)
HEALTH = _dumps({"status": "ok"})


class Settings:
    def __init__(self, chunks: int, ttft: float, gap: float) -> None:
        self.answers = Answers(chunks)
        self.ttft = ttft
        self.gap = gap


def _chunked_body(buf: bytearray, start: int) -> tuple[bytes, int] | None:
    """Decodes a chunked body from ``buf[start:]``: (body, end offset), or None while incomplete."""
    out = bytearray()
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n\r\n", pos - 2)  # optional trailers, then an empty line
            return (bytes(out), end + 4) if end >= 0 else None
        if len(buf) < pos + size + 2:
            return None
        out += buf[pos : pos + size]
        pos += size + 2
        if len(out) > MAX_BODY:
            raise ValueError("body too large")


class HttpProtocol(asyncio.Protocol):
    """One connection: parses requests in order; a paced stream holds later requests until it ends."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self.process()

    def send(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def process(self) -> None:
        while not self.closing and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self.send(error(413, "request head too large", close=True))
                    self.close()
                return
            try:
                lines = bytes(self.buf[:end]).split(b"\r\n")
                method, target, version = lines[0].split(b" ", 2)
                headers: dict[bytes, bytes] = {}
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    headers[name.strip().lower()] = value.strip()
                if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                    decoded = _chunked_body(self.buf, end + 4)
                    if decoded is None:
                        return
                    body, stop = decoded
                else:
                    length = int(headers.get(b"content-length", b"0"))
                    if length > MAX_BODY:
                        raise ValueError("body too large")
                    stop = end + 4 + length
                    if len(self.buf) < stop:
                        return
                    body = bytes(self.buf[end + 4 : stop])
            except ValueError:
                self.send(error(400, "malformed request", close=True))
                self.close()
                return
            del self.buf[:stop]
            conn = headers.get(b"connection", b"").lower()
            close = conn == b"close" or (version == b"HTTP/1.0" and conn != b"keep-alive")
            pending = self.handle(method, target.split(b"?", 1)[0], body, close)
            if pending is not None:
                self.busy = True
                asyncio.get_running_loop().create_task(self.paced(pending, close))
                return
            if close:
                self.close()
                return

    def handle(self, method: bytes, path: bytes, body: bytes, close: bool) -> Stream | None:
        """Answers at once, or returns a stream to be paced by ``paced``."""
        if path in (b"/v1/completions", b"/v1/chat/completions"):
            if method != b"POST":
                self.send(error(405, "use POST", close))
                return None
            try:
                data = json.loads(body)
                if not isinstance(data, dict):
                    raise ValueError("not an object")
            except ValueError:
                self.send(error(400, "body is not a JSON object", close))
                return None
            chat = path == b"/v1/chat/completions"
            model = str(data.get("model") or "tiny")
            answers = self.settings.answers
            if not data.get("stream"):
                self.send(whole(200, answers.completion(chat, model), close))
                return None
            options = data.get("stream_options")
            usage = isinstance(options, dict) and bool(options.get("include_usage"))
            stream = answers.stream(chat, model, usage)
            if self.settings.ttft or self.settings.gap:
                return stream
            self.send(sse_head(close) + stream.joined)
            return None
        if method == b"POST" and path == b"/bench/pacing":
            self.send(self.pacing(body, close))
        elif method == b"GET" and path == b"/v1/models":
            self.send(whole(200, MODELS, close))
        elif method == b"GET" and path == b"/health":
            self.send(whole(200, HEALTH, close))
        else:
            self.send(error(404, "no such route", close))
        return None

    def pacing(self, body: bytes, close: bool) -> bytes:
        settings = self.settings
        before = {"ttft_ms": settings.ttft * 1000, "gap_ms": settings.gap * 1000}
        try:
            data = json.loads(body)
            ttft, gap = float(data.get("ttft_ms", 0.0)), float(data.get("gap_ms", 0.0))
        except (ValueError, TypeError, AttributeError):
            return error(400, "pacing needs a JSON object with numbers ttft_ms and gap_ms", close)
        # no upper bound: what the command line set must be accepted back when the runner restores it
        if not (math.isfinite(ttft) and math.isfinite(gap) and ttft >= 0 and gap >= 0):
            return error(400, "ttft_ms and gap_ms must be finite and not negative", close)
        settings.ttft, settings.gap = ttft / 1000, gap / 1000
        return whole(200, _dumps(before), close)

    async def paced(self, stream: Stream, close: bool) -> None:
        try:
            self.send(sse_head(close))
            if self.settings.ttft:
                await asyncio.sleep(self.settings.ttft)
            for i, frame in enumerate(stream.frames):
                if self.closing:
                    return
                if i and self.settings.gap:
                    await asyncio.sleep(self.settings.gap)
                self.send(frame)
            self.send(stream.tail)
        finally:
            self.busy = False
        if close:
            self.close()
        elif self.buf:
            self.process()


async def serve(host: str, port: int, settings: Settings) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpProtocol(settings), host, port, reuse_address=True, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--chunks", type=int, default=64, help="content chunks per stream (default 64)")
    p.add_argument("--ttft-ms", type=float, default=0.0, help="delay before the first chunk")
    p.add_argument("--gap-ms", type=float, default=0.0, help="delay between chunks")
    p.add_argument("--no-uvloop", action="store_true", help="use asyncio's own loop even if uvloop is installed")
    a = p.parse_args(argv)
    if a.chunks < 1:
        p.error("--chunks must be at least 1")
    settings = Settings(a.chunks, a.ttft_ms / 1000, a.gap_ms / 1000)
    runner: Any = asyncio.run
    if not a.no_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            runner = uvloop.run
    runner(serve(a.host, a.port, settings))


if __name__ == "__main__":
    main()

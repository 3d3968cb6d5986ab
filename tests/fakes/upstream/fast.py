"""The fast front end, for the overhead benchmark: a raw asyncio protocol (uvloop when installed)
speaking just enough HTTP/1.1 (keep-alive, bodies by ``Content-Length`` or chunked) and answering from
answers drawn once by the OpenAI wire and kept, so the fake costs a few microseconds per request and the
subject in front of it dominates what is measured. No faults, no validation, no recording: the aiohttp
front end (``server``) is the one for tests.

    POST /v1/completions, /v1/chat/completions
        non-streaming: a ``WHOLE_TOKENS``-token answer with ``usage``
        ``"stream": true``: ``chunks`` token chunks, the finish chunk, the usage chunk if
        ``stream_options.include_usage``, ``[DONE]``; ``ttft`` seconds before the first chunk, ``gap``
        between chunks (0 and 0: the whole stream in one write)
    POST /v1/responses: OpenAI's own Responses (``responses.py``): the same answers as a response
        object, or as its named events (no ``[DONE]``), paced the same way
    POST /v1/embeddings: one cached 8-dimension vector per answer, with ``usage``
    GET /v1/models, GET /health
    POST /bench/pacing ``{"ttft_ms": 0, "gap_ms": 1}``: the benchmark runner paces the streams that
        follow (answers with the pacing it replaced, for the runner to put back)
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import signal
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from tests.fakes.upstream import responses
from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Engine, Job, chat_job, completion_job
from tests.fakes.upstream.wire import openai, vllm

PROMPT: Final = "Say hello"
K = TypeVar("K")
V = TypeVar("V")
WHOLE_TOKENS: Final = 6
MAX_HEAD: Final = 64 * 1024
MAX_BODY: Final = 8 * 1024 * 1024
CACHE_LIMIT: Final = 256
REASONS: Final = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}
SSE_HEAD: Final = b"Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"


def _dumps(obj: Any) -> bytes:
    return openai.WIRE.dumps(obj).encode()


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
    return whole(status, _dumps(openai.error(ApiError(status, message))), close)


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse_head(close: bool) -> bytes:
    return b"HTTP/1.1 200 OK\r\n%s%s\r\n" % (SSE_HEAD, b"Connection: close\r\n" if close else b"")


DONE: Final = http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
END: Final = b"0\r\n\r\n"  # a Responses stream ends with its terminal event and the body's end


@dataclass(frozen=True, slots=True)
class Stream:
    """A streamed answer: the frames (each already an HTTP chunk) and the tail ([DONE], end)."""

    frames: tuple[bytes, ...]
    tail: bytes
    joined: bytes  # frames + tail in one piece, for the no-delay case


class Answers:
    """Draws answers once per (route, model, stream, usage) with the one model and wire, and keeps them."""

    def __init__(self, chunks: int, vllm_chunks: bool = False) -> None:
        self.chunks = chunks
        self.vllm_chunks = vllm_chunks  # streams in vLLM's chunks (``stop_reason``...) even without ids
        self._engine = Engine(("tiny",))
        self._whole: dict[tuple[bool, str], bytes] = {}
        self._streams: dict[tuple[bool, str, bool, bool], Stream] = {}
        self._other: dict[tuple[str, str] | tuple[str, str, bool], bytes | Stream] = {}

    def _job(self, chat: bool, model: str, tokens: int, usage: bool | None, ids: bool = False) -> Job:
        """The model's answer to the benchmark's prompt: ``tokens`` long (EOS ignored); a stream if
        ``usage`` is not None; with vLLM's ``return_token_ids`` if ``ids``."""
        body: dict[str, Any] = {"model": model, "max_tokens": tokens, "ignore_eos": True, "return_token_ids": ids}
        if usage is not None:
            body |= {"stream": True, "stream_options": {"include_usage": usage}}
        if chat:
            return chat_job(self._engine, body | {"messages": [{"role": "user", "content": PROMPT}]}, "bench")
        return completion_job(self._engine, body | {"prompt": PROMPT}, "bench")

    def completion(self, chat: bool, model: str) -> bytes:
        hit = self._whole.get((chat, model))
        if hit is None:
            hit = _dumps(openai.body(self._job(chat, model, WHOLE_TOKENS, None), chat))
            keep(self._whole, (chat, model), hit)
        return hit

    def stream(self, chat: bool, model: str, usage: bool, ids: bool = False) -> Stream:
        """A stream in OpenAI's chunks; with ``ids`` (vLLM's ``return_token_ids``), or when the server
        speaks vLLM's (``--vllm-chunks``), in vLLM's."""
        hit = self._streams.get((chat, model, usage, ids))
        if hit is None:
            job = self._job(chat, model, self.chunks, usage, ids)
            chunks = vllm.WIRE.chunks(job, chat) if ids or self.vllm_chunks else openai.chunks(job, chat)
            frames = tuple(http_chunk(b"data: " + _dumps(c.payload) + b"\n\n") for c in chunks)
            hit = Stream(frames, DONE, b"".join(frames) + DONE)
            keep(self._streams, (chat, model, usage, ids), hit)
        return hit

    def response(self, model: str, stream: bool) -> bytes | Stream:
        """OpenAI's /v1/responses for the benchmark's prompt: the chat answer as a response object, or
        its named events (a stream of ``chunks`` text deltas)."""
        key = ("responses", model, stream)
        hit = self._other.get(key)
        if hit is None:
            body = {"model": model, "input": PROMPT, "stream": stream}
            job = self._job(True, model, self.chunks if stream else WHOLE_TOKENS, False if stream else None)
            drawn = responses.Answer(body, job)
            if stream:
                frames = tuple(
                    http_chunk(b"event: " + str(c.event).encode() + b"\ndata: " + _dumps(c.payload) + b"\n\n")
                    for c in drawn.events()
                )
                hit = Stream(frames, END, b"".join(frames) + END)
            else:
                hit = _dumps(drawn.whole())
            keep(self._other, key, hit)
        return hit

    def embedding(self, model: str) -> bytes:
        hit = self._other.get(("embeddings", model))
        if not isinstance(hit, bytes):
            vector = [round(math.sin(i + 1) / 3, 6) for i in range(8)]
            data = [{"object": "embedding", "index": 0, "embedding": vector}]
            hit = _dumps(
                {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 2, "total_tokens": 2}}
            )
            keep(self._other, ("embeddings", model), hit)
        return hit


def keep(cache: dict[K, V], key: K, value: V) -> None:
    """Bounded: a client sending endless model names empties the cache rather than filling memory."""
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    cache[key] = value


MODELS: Final = _dumps({"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "bench"}]})
HEALTH: Final = _dumps({"status": "ok"})


class Settings:
    def __init__(self, chunks: int, ttft: float, gap: float, vllm_chunks: bool = False) -> None:
        self.answers = Answers(chunks, vllm_chunks)
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
            stream = answers.stream(chat, model, usage, bool(data.get("return_token_ids")))
            if self.settings.ttft or self.settings.gap:
                return stream
            self.send(sse_head(close) + stream.joined)
            return None
        if path in (b"/v1/responses", b"/v1/embeddings") and method == b"POST":
            return self.other(path, body, close)
        if method == b"POST" and path == b"/bench/pacing":
            self.send(self.pacing(body, close))
        elif method == b"GET" and path == b"/v1/models":
            self.send(whole(200, MODELS, close))
        elif method == b"GET" and path == b"/health":
            self.send(whole(200, HEALTH, close))
        else:
            self.send(error(404, "no such route", close))
        return None

    def other(self, path: bytes, body: bytes, close: bool) -> Stream | None:
        """/v1/responses and /v1/embeddings: whole answers at once; a Responses stream like a chat's."""
        try:
            data = json.loads(body)
            model = str(data.get("model") or "tiny")
        except (ValueError, AttributeError):
            self.send(error(400, "body is not a JSON object", close))
            return None
        answers = self.settings.answers
        if path == b"/v1/embeddings":
            self.send(whole(200, answers.embedding(model), close))
            return None
        got = answers.response(model, bool(data.get("stream")))
        if isinstance(got, bytes):
            self.send(whole(200, got, close))
            return None
        if self.settings.ttft or self.settings.gap:
            return got
        self.send(sse_head(close) + got.joined)
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
                await asyncio.sleep(self.settings.ttft)  # deliberate: a model's time to its first token
            for i, frame in enumerate(stream.frames):
                if self.closing:
                    return
                if i and self.settings.gap:
                    await asyncio.sleep(self.settings.gap)  # deliberate: a model's time per token
                self.send(frame)
            self.send(stream.tail)
        finally:
            self.busy = False
        if close:
            self.close()
        elif self.buf:
            self.process()


async def serve_fast(host: str, port: int, settings: Settings, ready: str = "") -> None:
    # The fake is part of the instrument: with 9,900 paced streams its collections took 25-34 ms each
    # and the tokens they held up showed as every subject's delay. What it makes in cycles is little
    # (a connection's transport and protocol part at its close), so it runs without the collector.
    gc.collect()
    gc.freeze()
    gc.disable()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpProtocol(settings), host, port, reuse_address=True, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        if ready:
            print(ready, flush=True)
        await stop.wait()

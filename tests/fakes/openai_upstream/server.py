"""The HTTP side: fault markers, the aiohttp app (auth, recording, vLLM's error envelope), streaming, and
starting a server."""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import re
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from tests.fakes.openai_upstream.bodies import TokenizeRequest, parse
from tests.fakes.openai_upstream.common import (
    JSON,
    MAX_MODEL_LEN,
    ApiError,
    ClientGone,
    Vocabulary,
    dumps,
    invalid,
)
from tests.fakes.openai_upstream.engine import Job, chat_job, completion_job, message_text, render_chat
from tests.fakes.openai_upstream.render import Chunk, chat_body, chat_chunks, completion_body, completion_chunks

POLL_SECONDS: Final = 0.02
GENERATION_PATHS: Final = frozenset({"/v1/completions", "/v1/chat/completions"})
FAULT_RE: Final = re.compile(r"\[\[fault:(once:)?([^\]]*)\]\]")

# --- faults --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Faults:
    status: int | None = None
    retry_after: str | None = None
    reset_before: bool = False
    reset_after: int | None = None
    error_after: int | None = None
    hang_before: float = 0.0
    gap: float = 0.0  # hang_between + slow: seconds before every stream event after the first


FAULT_KEYS: Final = {
    "status",
    "retry_after",
    "reset_before",
    "reset_after",
    "error_after",
    "hang_before",
    "hang_between",
    "slow",
    "id",
}


def parse_faults(text: str, fired: set[str]) -> Faults:
    """Every ``[[fault:...]]`` marker in ``text``; a ``once:`` marker only the first time it is seen."""
    fields: dict[str, str] = {}
    for match in FAULT_RE.finditer(text):
        if match.group(1):
            if match.group(0) in fired:
                continue
            fired.add(match.group(0))
        for item in filter(None, (part.strip() for part in match.group(2).split(","))):
            key, _, value = item.partition("=")
            fields[key.strip()] = value.strip()
    if unknown := set(fields) - FAULT_KEYS:
        raise ApiError(500, f"fake upstream: unknown fault key(s) {sorted(unknown)} in {text!r}")
    try:
        return Faults(
            status=int(fields["status"]) if "status" in fields else None,
            retry_after=fields.get("retry_after"),
            reset_before="reset_before" in fields,
            reset_after=int(fields["reset_after"]) if "reset_after" in fields else None,
            error_after=int(fields["error_after"]) if "error_after" in fields else None,
            hang_before=float(fields.get("hang_before") or 0),
            gap=float(fields.get("hang_between") or 0) + float(fields.get("slow") or 0),
        )
    except ValueError as exc:
        raise ApiError(500, f"fake upstream: bad fault marker value ({exc})") from None


def marker_text(body: JSON) -> str:
    """Where faults are read from: the prompt text(s), or the last chat message's content."""
    messages = body.get("messages")
    if isinstance(messages, list):
        last = messages[-1] if messages else None
        content = last.get("content") if isinstance(last, dict) else None
        return message_text(content) if isinstance(content, str | list) else ""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else ""


def injected(f: Faults) -> ApiError:
    headers = {"Retry-After": f.retry_after} if f.retry_after else {}
    return ApiError(f.status or 500, f"fake upstream: injected fault (status={f.status})", None, headers)


# --- HTTP ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # parsed JSON, or None when the body was empty or not JSON
    raw: bytes


@dataclass
class UpstreamState:
    """Everything one fake server knows; tests reach it as ``app[STATE]`` or through ``FakeUpstream``."""

    models: tuple[str, ...]
    api_key: str | None
    created: int = field(default_factory=lambda: int(time.time()))
    vocab: Vocabulary = field(default_factory=Vocabulary)
    requests: list[RecordedRequest] = field(default_factory=list)
    cancelled: int = 0
    active: int = 0
    fired_once: set[str] = field(default_factory=set)

    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.models:
            raise ApiError(404, f"The model `{model}` does not exist.", "model")


STATE: Final = web.AppKey("fake_openai_upstream_state", UpstreamState)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def pause(request: web.Request, seconds: float) -> None:
    """Sleep, noticing a client that hangs up meanwhile (vLLM aborts the request then)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not gone(request):
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(left, POLL_SECONDS))
    raise ClientGone


def abort(request: web.Request, response: web.StreamResponse | None = None) -> web.StreamResponse:
    """Drop the TCP connection without a goodbye: no (further) headers, body or ``[DONE]``."""
    if request.transport is not None:
        request.transport.abort()
    return response if response is not None else web.Response()


def try_json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


@web.middleware
async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
    raw = await request.read()
    headers = {k.lower(): v for k, v in request.headers.items()}
    request.app[STATE].requests.append(RecordedRequest(request.method, request.path, headers, try_json(raw), raw))
    return await handler(request)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Like vLLM's ``--api-key``, only ``/v1`` paths are guarded; the body is OpenAI's, not vLLM's."""
    key = request.app[STATE].api_key
    sent = request.headers.get("Authorization", "")
    if key is None or not request.path.startswith("/v1") or hmac.compare_digest(sent, f"Bearer {key}"):
        return await handler(request)
    error = {"message": "Incorrect API key provided.", "type": "invalid_request_error", "param": None}
    return web.json_response({"error": error | {"code": "invalid_api_key"}}, status=401, dumps=dumps)


@web.middleware
async def envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors into vLLM's envelope; in-flight and hung-up counts for generation requests."""
    state, counted = request.app[STATE], request.path in GENERATION_PATHS
    state.active += int(counted)
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except (ClientGone, asyncio.CancelledError) as exc:
        state.cancelled += int(counted)
        if isinstance(exc, asyncio.CancelledError):
            raise
        return web.Response()
    finally:
        state.active -= int(counted)


async def json_body(request: web.Request) -> JSON:
    try:
        body = json.loads(await request.read())
    except ValueError as exc:
        raise ApiError(400, f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Input should be a valid dictionary or object to extract fields from", None)
    return body


async def stream(request: web.Request, faults: Faults, chunks: Iterator[Chunk]) -> web.StreamResponse:
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    response, tokens_sent = web.StreamResponse(headers=headers), 0
    try:
        await response.prepare(request)
        for n, item in enumerate(chunks):
            await pause(request, faults.gap if n else 0)
            await response.write(item.encode())
            tokens_sent += item.is_token
            if faults.reset_after is not None and tokens_sent >= faults.reset_after:
                return abort(request, response)
            if faults.error_after is not None and tokens_sent >= faults.error_after:
                break
        if faults.reset_after is not None:
            return abort(request, response)
        await pause(request, faults.gap)
        if faults.error_after is not None:
            await response.write(STREAM_ERROR)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except (ConnectionError, ClientGone):
        request.app[STATE].cancelled += 1
    return response


# vLLM's create_streaming_error_response: the error envelope as one more event, then [DONE].
STREAM_ERROR: Final = f"data: {dumps(ApiError(500, 'fake upstream: injected stream error').envelope())}\n\n".encode()


def generation_handler(
    build: Callable[[UpstreamState, JSON, str], Job],
    render: Callable[[Job], JSON],
    chunks: Callable[[Job], Iterator[Chunk]],
) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        body = await json_body(request)
        faults = parse_faults(marker_text(body), state.fired_once)
        await pause(request, faults.hang_before)
        if faults.reset_before:
            return abort(request)
        if faults.status is not None:
            raise injected(faults)
        # vLLM bases the response id on X-Request-Id when the client sends one.
        job = build(state, body, request.headers.get("X-Request-Id") or uuid.uuid4().hex)
        if job.stream:
            return await stream(request, faults, chunks(job))
        await pause(request, faults.gap * max(len(c.steps) for c in job.choices))
        return abort(request) if faults.reset_after is not None else web.json_response(render(job), dumps=dumps)

    return handle


async def health(request: web.Request) -> web.Response:
    return web.Response()


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    permission = {"object": "model_permission", "created": state.created, "allow_create_engine": False}
    permission |= {"allow_sampling": True, "allow_logprobs": True, "allow_view": True, "organization": "*"}
    cards = [
        {"id": m, "object": "model", "created": state.created, "owned_by": "vllm", "root": m, "parent": None}
        | {"max_model_len": MAX_MODEL_LEN, "permission": [{"id": f"modelperm-{m}"} | permission]}
        for m in state.models
    ]
    return web.json_response({"object": "list", "data": cards}, dumps=dumps)


async def tokenize_endpoint(request: web.Request) -> web.Response:
    state = request.app[STATE]
    req = parse(TokenizeRequest, await json_body(request))
    state.check_model(req.model)
    if req.prompt is None and req.messages is None:
        raise invalid("Either prompt or messages must be provided.", "prompt")
    text = req.prompt if req.prompt is not None else render_chat(req.messages or [])
    ids = state.vocab.encode(text)
    strs = [state.vocab.token(t) for t in ids] if req.return_token_strs else None
    return web.json_response(
        {"count": len(ids), "max_model_len": MAX_MODEL_LEN, "tokens": ids, "token_strs": strs}, dumps=dumps
    )


async def detokenize_endpoint(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await json_body(request)
    state.check_model(body.get("model"))
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise invalid("tokens must be a list of token ids", "tokens")
    return web.json_response({"prompt": state.vocab.decode(tokens)}, dumps=dumps)


async def metrics(request: web.Request) -> web.Response:
    """The three load gauges a router scrapes (vLLM's names)."""
    state = request.app[STATE]
    lines = []
    for name, value in (
        ("num_requests_running", state.active),
        ("num_requests_waiting", 0),
        ("kv_cache_usage_perc", 0.0),
    ):
        lines += [f"# TYPE vllm:{name} gauge"] + [
            f'vllm:{name}{{engine="0",model_name="{m}"}} {value}' for m in state.models
        ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def create_app(models: Sequence[str] = ("tiny",), api_key: str | None = None) -> web.Application:
    app = web.Application(middlewares=[record, authenticate, envelope], client_max_size=64 * 2**20)
    app[STATE] = UpstreamState(models=tuple(models), api_key=api_key)
    app.router.add_routes(
        [
            web.get("/health", health),
            web.get("/metrics", metrics),
            web.get("/v1/models", list_models),
            web.post("/v1/completions", generation_handler(completion_job, completion_body, completion_chunks)),
            web.post("/v1/chat/completions", generation_handler(chat_job, chat_body, chat_chunks)),
            web.post("/tokenize", tokenize_endpoint),
            web.post("/detokenize", detokenize_endpoint),
        ]
    )
    return app


# --- running -------------------------------------------------------------------------------------


class FakeUpstream:
    """A started fake: ``url`` ends in ``/v1`` (the adapter's base URL); ``origin`` does not."""

    def __init__(self, runner: web.AppRunner, origin: str) -> None:
        self._runner = runner
        self.origin = origin
        self.url = origin + "/v1"
        self.state = runner.app[STATE]

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.state.requests

    @property
    def cancelled(self) -> int:
        return self.state.cancelled

    @property
    def active(self) -> int:
        return self.state.active

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> FakeUpstream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def start_upstream(
    models: Sequence[str] = ("tiny",), api_key: str | None = None, host: str = "127.0.0.1", port: int = 0
) -> FakeUpstream:
    # handler_cancellation: like vLLM, a request whose client hangs up is abandoned, not finished.
    runner = web.AppRunner(
        create_app(models, api_key), handler_cancellation=True, shutdown_timeout=1.0, access_log=None
    )
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return FakeUpstream(runner, f"http://{shown}:{bound_port}")


async def serve(args: argparse.Namespace) -> None:
    upstream = await start_upstream(args.model or ("tiny",), args.api_key, args.host, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {upstream.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await upstream.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible (vLLM-flavoured) upstream for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port; the READY line shows it")
    parser.add_argument("--model", action="append", help="served model name (repeatable; default: tiny)")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 paths")
    asyncio.run(serve(parser.parse_args(argv)))

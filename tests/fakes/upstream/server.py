"""The aiohttp front end the tests run: one wire per server, auth, recording, faults, streaming, and
vLLM's side routes (models, tokenize, detokenize, the load gauges a router scrapes)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from aiohttp import web

from tests.fakes.upstream import responses
from tests.fakes.upstream.bodies import ChatRequest, TokenizeRequest, parse
from tests.fakes.upstream.errors import ApiError, ClientGone, invalid
from tests.fakes.upstream.faults import Faults, marker_text, parse_faults
from tests.fakes.upstream.jobs import Engine, Job, chat_job, completion_job, render_chat
from tests.fakes.upstream.wire import WIRES, Chunk, Wire
from tests.fakes.upstream.wire.anthropic import count_read

POLL_SECONDS: Final = 0.02
GENERATION_PATHS: Final = ("/completions", "/messages", "/responses")
RECORDED_PATHS: Final = (*GENERATION_PATHS, "/count_tokens")
STALL_SECONDS: Final = 3600.0  # ``stall_after``: longer than any test waits
PING_SECONDS: Final = 0.05  # ``ping_after``: a keep-alive this often, well within any idle bound
JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # parsed JSON, or None when the body was empty or not JSON
    raw: bytes
    peer_port: int = 0  # the client's port: which connection the request came on


@dataclass
class UpstreamState:
    """Everything one fake server knows; tests reach it as ``app[STATE]`` or through ``Upstream``."""

    wire: Wire
    engine: Engine
    api_key: str | None
    faults: str = ""  # markers applied to every request, e.g. "[[fault:status=503]]" for a dead target
    created: int = field(default_factory=lambda: int(time.time()))
    requests: list[RecordedRequest] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)  # the last stream's events, as written after "data: "
    cancelled: int = 0
    active: int = 0
    waiting: int = 0  # what /metrics reports as the engine's queue (vllm:num_requests_waiting)
    kv_usage: float = 0.0  # and as its KV cache in use (vllm:kv_cache_usage_perc, 0-1)
    fired_once: set[str] = field(default_factory=set)
    stored: dict[str, Any] = field(default_factory=dict)  # /v1/responses kept for previous_response_id
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # opened by the test: ``hold_after`` goes on

    def respond(self, exc: ApiError) -> web.Response:
        text = self.wire.dumps(self.wire.error(exc))
        return web.Response(text=text, status=exc.status, headers=exc.headers, content_type="application/json")


STATE: Final = web.AppKey("fake_upstream_state", UpstreamState)
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
        await asyncio.sleep(min(left, POLL_SECONDS))  # deliberate: the hang or pace a fault asked for
    raise ClientGone


async def wait_gate(request: web.Request) -> None:
    """Wait for the test to open the gate, noticing a client that hangs up meanwhile."""
    gate = request.app[STATE].gate
    while not gate.is_set():
        if gone(request):
            raise ClientGone
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gate.wait(), POLL_SECONDS)


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
    """Generation and count_tokens requests, refused ones included (probes of /models or /health, and
    /tokenize, are not recorded)."""
    if request.path.endswith(RECORDED_PATHS):
        raw = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        recorded = RecordedRequest(request.method, request.path, headers, try_json(raw), raw, peer[1] if peer else 0)
        request.app[STATE].requests.append(recorded)
    return await handler(request)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Like vLLM's ``--api-key``, only API paths are guarded (not /health or /metrics)."""
    state = request.app[STATE]
    wire, key = state.wire, state.api_key
    sent = request.headers.get(wire.key_header, "")
    wanted = f"Bearer {key}" if wire.key_header == "authorization" else key
    if not key or not request.path.startswith(("/v", "/tokenize", "/detokenize")):
        return await handler(request)
    if hmac.compare_digest(sent.encode(), (wanted or "").encode()):
        return await handler(request)
    return state.respond(ApiError(401, "Incorrect API key provided."))


@web.middleware
async def envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors into the wire's envelope; in-flight and hung-up counts for generation requests."""
    state = request.app[STATE]
    counted = request.path.endswith(GENERATION_PATHS)
    state.active += int(counted)
    try:
        return await handler(request)
    except ApiError as exc:
        return state.respond(exc)
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


async def stream(
    request: web.Request, faults: Faults, chunks: Iterator[Chunk], done: bool | None = None
) -> web.StreamResponse:
    """``done``: the stream ends with ``[DONE]`` (default: the wire's rule; Responses streams never)."""
    state = request.app[STATE]
    wire, sent = state.wire, state.sent
    sent.clear()
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    response, tokens_sent, held = web.StreamResponse(headers=headers), 0, []
    for name, value in wire.headers:
        response.headers.add(name, value)
    try:
        await response.prepare(request)
        for n, item in enumerate(chunks):
            await pause(request, faults.gap if n else faults.first_token)
            sent.append(wire.dumps(item.payload).encode())
            event = (b"event: " + item.event.encode() + b"\n" if item.event else b"") + b"data: " + sent[-1] + b"\n\n"
            if faults.burst:
                held.append(event)
            else:
                await response.write(event)
            tokens_sent += item.is_token
            if faults.reset_after is not None and tokens_sent >= faults.reset_after:
                return abort(request, response)
            if faults.error_after is not None and tokens_sent >= faults.error_after:
                break
            if faults.stall_after is not None and tokens_sent >= faults.stall_after:
                await pause(request, STALL_SECONDS)  # until the client hangs up
            if faults.hold_after is not None and tokens_sent == faults.hold_after:
                await wait_gate(request)
            if faults.ping_after is not None and tokens_sent >= faults.ping_after:
                await keep_alive(request, response, wire.error_event)
        if faults.reset_after is not None:
            return abort(request, response)
        await pause(request, faults.gap)
        if faults.error_after is not None:
            # vLLM's create_streaming_error_response: the error envelope as one more event, then [DONE].
            error = ApiError(500, "fake upstream: injected stream error")
            named = b"event: error\n" if wire.error_event else b""  # Anthropic's stream names its error
            held.append(named + b"data: " + wire.dumps(wire.error(error)).encode() + b"\n\n")
        if wire.done if done is None else done:
            held.append(b"data: [DONE]\n\n")
        await response.write(b"".join(held))
        await pause(request, faults.end_after)
        await response.write_eof()
    except (ConnectionError, ClientGone):
        state.cancelled += 1
    return response


async def keep_alive(request: web.Request, response: web.StreamResponse, named: bool) -> None:
    """Keep-alives and nothing else until the client hangs up (``ping_after``): Anthropic's ``ping``
    event where the wire names its events, else an SSE comment, as proxies send."""
    ping = b'event: ping\ndata: {"type": "ping"}\n\n' if named else b": ping\n\n"
    while not gone(request):
        await response.write(ping)
        await asyncio.sleep(PING_SECONDS)  # deliberate: the pace of the keep-alives the fault asked for
    raise ClientGone


async def truncated(request: web.Request, body: bytes, how: str) -> web.StreamResponse:
    """Half of ``body``, then the connection dropped: with a ``Content-Length`` that promised all of
    it, or as a chunked body that never sends its last chunk."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    if how == "chunked":
        response.enable_chunked_encoding()
    else:
        response.content_length = len(body)
    await response.prepare(request)
    await response.write(body[: len(body) // 2])
    return abort(request, response)


def versioned(request: web.Request, wire: Wire) -> None:
    """The wire's version header, where it requires one (Anthropic's, in Anthropic's words)."""
    if wire.version_header and not request.headers.get(wire.version_header):
        raise ApiError(400, f"{wire.version_header}: header is required")


def generation_handler(build: Callable[[Engine, JSON, str], Job]) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        wire = state.wire
        chat = request.path.endswith(wire.chat_path)
        versioned(request, wire)
        body = await json_body(request)
        faults = parse_faults(marker_text(body) + state.faults, state.fired_once)
        await pause(request, faults.hang_before)
        if faults.reset_before:
            return abort(request)
        if faults.status is not None:
            raise faults.injected()
        # vLLM bases the response id on X-Request-Id when the client sends one.
        rid = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        if chat and faults.tool is not None:
            job = chat_job(state.engine, wire.read(body), rid, faults.tool, faults.tool_arg or "")
        else:
            job = build(state.engine, wire.read(body), rid)
        if faults.cached or faults.cache_write:
            job = replace(job, cached=faults.cached, cache_written=faults.cache_write)
        if faults.dense or faults.dense_answer:
            job = replace(job, dense=faults.dense, dense_answer=faults.dense_answer)
        if job.stream:
            return await stream(request, faults, wire.chunks(job, chat))
        await pause(request, faults.gap * max(len(c.steps) for c in job.choices))
        if faults.reset_after is not None:
            return abort(request)
        if faults.truncate is not None:
            return await truncated(request, wire.dumps(wire.body(job, chat)).encode(), faults.truncate)
        response = web.Response(text=wire.dumps(wire.body(job, chat)), content_type="application/json")
        for name, value in wire.headers:
            response.headers.add(name, value)
        return response

    return handle


async def responses_endpoint(request: web.Request) -> web.StreamResponse:
    """OpenAI's ``/v1/responses`` (``tests/fakes/upstream/responses.py``), with the same faults."""
    state = request.app[STATE]
    body = await json_body(request)
    markers = json.dumps(body.get("input"), ensure_ascii=False)  # a marker is read in any input item
    faults = parse_faults(markers + state.faults, state.fired_once)
    await pause(request, faults.hang_before)
    if faults.reset_before:
        return abort(request)
    if faults.status is not None:
        raise faults.injected()
    rid = request.headers.get("X-Request-Id") or uuid.uuid4().hex
    drawn, conversation = responses.answer(state, body, rid, faults.tool, faults.tool_arg or "")
    responses.keep(state, body, drawn, conversation)
    if body.get("stream"):
        return await stream(request, faults, drawn.events(), done=False)
    return responses.whole(drawn)


async def probe_faults(request: web.Request) -> None:
    """A server started with ``probes_hang`` holds its probes until the prober hangs up."""
    if parse_faults(request.app[STATE].faults, set()).probes_hang:
        await asyncio.Event().wait()  # a deliberate hang, cut by the prober's timeout


async def health(request: web.Request) -> web.Response:
    await probe_faults(request)
    return web.Response()


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    permission = {"object": "model_permission", "created": state.created, "allow_create_engine": False}
    permission |= {"allow_sampling": True, "allow_logprobs": True, "allow_view": True, "organization": "*"}
    cards = [
        {"id": m, "object": "model", "created": state.created, "owned_by": "vllm", "root": m, "parent": None}
        | {"max_model_len": state.engine.context, "permission": [{"id": f"modelperm-{m}"} | permission]}
        for m in state.engine.models
    ]
    return web.Response(text=state.wire.dumps({"object": "list", "data": cards}), content_type="application/json")


async def tokenize_endpoint(request: web.Request) -> web.Response:
    state = request.app[STATE]
    req = parse(TokenizeRequest, await json_body(request))
    state.engine.check_model(req.model)
    if req.prompt is None and req.messages is None:
        raise invalid("Either prompt or messages must be provided.", "prompt")
    text = req.prompt if req.prompt is not None else render_chat(req.messages or [])
    ids = state.engine.vocab.encode(text)
    strs = [state.engine.vocab.token(t) for t in ids] if req.return_token_strs else None
    return web.json_response(
        {"count": len(ids), "max_model_len": state.engine.context, "tokens": ids, "token_strs": strs}
    )


async def count_tokens_endpoint(request: web.Request) -> web.Response:
    """Anthropic's ``POST /v1/messages/count_tokens``: the prompt tokens a message with this body
    would report (a ``status`` fault marker in the body makes it fail instead)."""
    state = request.app[STATE]
    versioned(request, state.wire)
    body = await json_body(request)
    faults = parse_faults(marker_text(body) + state.faults, state.fired_once)
    if faults.status is not None:
        raise faults.injected()
    chat = parse(ChatRequest, count_read(body))
    state.engine.check_model(chat.model)
    text = render_chat(chat.messages, chat.add_generation_prompt, chat.continue_final_message)
    return web.json_response({"input_tokens": len(state.engine.vocab.encode(text))})


async def detokenize_endpoint(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await json_body(request)
    state.engine.check_model(body.get("model"))
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise invalid("tokens must be a list of token ids", "tokens")
    return web.json_response({"prompt": state.engine.vocab.decode(tokens)})


async def metrics(request: web.Request) -> web.Response:
    """The three load gauges a router scrapes (vLLM's names)."""
    await probe_faults(request)
    state = request.app[STATE]
    lines = []
    for name, value in (
        ("num_requests_running", state.active),
        ("num_requests_waiting", state.waiting),
        ("kv_cache_usage_perc", state.kv_usage),
    ):
        lines += [f"# TYPE vllm:{name} gauge"] + [
            f'vllm:{name}{{engine="0",model_name="{m}"}} {value}' for m in state.engine.models
        ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def create_app(
    kind: str = "vllm", models: Sequence[str] | None = None, api_key: str | None = None, faults: str = ""
) -> web.Application:
    wire = WIRES[kind]
    app = web.Application(middlewares=[record, authenticate, envelope], client_max_size=64 * 2**20)
    engine = Engine(tuple(models or ("up-model",)), wire.strict_models, wire.context)
    app[STATE] = UpstreamState(wire, engine, api_key or None, faults)
    routes = {wire.prefix, "/v1"}
    app.router.add_routes(
        [
            web.get("/health", health),
            web.get("/metrics", metrics),
            *(web.get(prefix + "/models", list_models) for prefix in routes),
            web.post(wire.prefix + "/completions", generation_handler(completion_job)),
            web.post(wire.prefix + wire.chat_path, generation_handler(chat_job)),
            *((web.post("/v1/responses", responses_endpoint),) if kind in ("openai", "vllm") else ()),
            *((web.post("/v1/messages/count_tokens", count_tokens_endpoint),) if kind == "anthropic" else ()),
            web.post("/tokenize", tokenize_endpoint),
            web.post("/detokenize", detokenize_endpoint),
        ]
    )
    return app


class Upstream:
    """A started fake: ``url`` is a client's base URL (``origin`` plus ``/v1`` for OpenAI's kinds)."""

    def __init__(self, runner: web.AppRunner, origin: str) -> None:
        self._runner = runner
        self.state = runner.app[STATE]
        self.origin = origin
        self.url = origin + self.state.wire.base_suffix

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.state.requests

    @property
    def sent(self) -> list[bytes]:
        return self.state.sent

    @property
    def cancelled(self) -> int:
        return self.state.cancelled

    @property
    def active(self) -> int:
        return self.state.active

    def release(self) -> None:
        """Open the gate: every stream held by ``hold_after`` goes on to its end."""
        self.state.gate.set()

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> Upstream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def start(
    kind: str = "vllm",
    models: Sequence[str] | None = None,
    api_key: str | None = None,
    faults: str = "",
    host: str = "127.0.0.1",
    port: int = 0,
) -> Upstream:
    # handler_cancellation: like vLLM, a request whose client hangs up is abandoned, not finished.
    app = create_app(kind, models, api_key, faults)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return Upstream(runner, f"http://{shown}:{bound_port}")

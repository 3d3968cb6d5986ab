"""The request pipeline: one request's named steps, in the order they run.

    route → read → authenticate → parse → [recall] → choose → admit → [queue] → call → relay | answer → settle

``route`` is ``RouteHandler``: one handler per route-table entry, built once at start-up around its
``RouteSpec``. Each later step is a function of one ``Exchange``, the request's context, and fills in
its part of it: ``read`` the body and the dialect it refines, ``authenticate`` the principal, ``parse``
the ``InternalRequest`` (``recall``: a stored Responses chain put before it), ``choose`` the model's
route (its targets, the allow-list), ``admit`` the limits' plan, ``queue`` a slot of the model's
capacity (a model with a ``queue`` only), ``call`` the upstream through ``gateway.routing.dispatch``
(target order, feature fit, fallbacks), then ``relay`` a stream or ``answer`` a whole reply, and
``settle`` the slot and the limits with the real usage.

Errors are mapped once, at the ``edge``: every error before the first byte is a
``GatewayError`` answered in the dialect that is answering. Once a stream has started, ``relay`` sends
errors in-band and ends the stream the dialect's way. What does not belong here: a dialect's wire
format (``gateway.dialects``), limits arithmetic (``gateway.limits``), target choice
(``gateway.routing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from random import getrandbits
from typing import Any

from aiohttp import web

from gateway.core.errors import GatewayError, ShuttingDown
from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import Batch
from gateway.core.upstream import Call
from gateway.dialects.base import Dialect, StreamEncoder, bearer_token, id_headers
from gateway.dialects.common import dumps, loads
from gateway.limits.admission import Ask
from gateway.limits.fairq import PRIORITY_HEADER, ModelQueue, Slot
from gateway.limits.plan import Plan, bounded
from gateway.obs.load import ModelLoad
from gateway.obs.tracing import RequestTrace
from gateway.policy.auth import Principal
from gateway.routing import dispatch, resume
from gateway.routing.table import Route, check_kind
from gateway.runtime.internals import EventStream
from gateway.web.body import read_body
from gateway.web.record import FAULTS, InFlight, RequestLog
from gateway.web.relay import Relay
from gateway.web.state import GATEWAY, Gateway, Generation

OVERHEAD_HEADER = "X-Gateway-Overhead-Ms"
BUDGET_HEADER = "X-Budget-Exceeded"  # a soft budget was gone past: whose ("team" or "key")
SESSION_HEADER = "X-Session-Id"  # pins a conversation to one replica (prefix caches stay warm)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(frozen=True, slots=True)
class RouteSpec:
    method: str
    path: str
    dialect: Dialect
    operation: Operation
    flavour: str = ""
    kept: bool = False  # answers are stored for later requests (Responses' ``store``: ``stored.py``)


@dataclass(slots=True, eq=False)
class Exchange:
    """One request's context, as the steps fill it in: each field is set by the step named beside it
    and read by the ones after it."""

    request: web.Request
    spec: RouteSpec
    gw: Gateway
    gen: Generation  # this request's config generation, whatever a reload swaps in meanwhile
    log: RequestLog
    dialect: Dialect  # the route's; ``read`` refines it
    trace: RequestTrace | None  # None unless tracing is configured: then nothing of it runs
    data: dict[str, Any] = field(init=False)  # read: the decoded body
    principal: Principal = field(init=False)  # authenticate
    ireq: InternalRequest = field(init=False)  # parse
    route: Route = field(init=False)  # choose
    load: ModelLoad | None = None  # choose: the model's levels, once it is known
    plan: Plan | None = None  # admit
    deadline: float | None = None  # admit
    slot: Slot | None = None  # queue: the model's slot, when the model has a queue

    def reply_headers(self, first: dict[str, str]) -> dict[str, str]:
        """``first``, then the request id, the gateway's overhead so far, and a soft budget gone past."""
        log = self.log
        headers = {**first, **id_headers(self.dialect, log.rid), OVERHEAD_HEADER: f"{log.overhead() * 1000:.3f}"}
        if log.budget_exceeded:
            headers[BUDGET_HEADER] = log.budget_exceeded
        return headers


class RouteHandler:
    """Step ``route``: the handler of one route-table entry (``handle``, a bound method: aiohttp takes
    coroutine functions only); counts its requests in flight under the route's dialect (before the
    body refines it)."""

    __slots__ = ("in_flight", "spec")

    def __init__(self, spec: RouteSpec, requests: InFlight) -> None:
        self.spec = spec
        self.in_flight = requests.level(spec.dialect.name)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        in_flight = self.in_flight
        in_flight.n += 1
        try:
            return await edge(begin(self.spec, request))
        finally:
            in_flight.n -= 1


def begin(spec: RouteSpec, request: web.Request) -> Exchange:
    gw = request.app[GATEWAY]
    tracer = gw.tracer
    trace = None if tracer is None else tracer.begin(request.headers, spec.method, spec.path, spec.operation)
    log = RequestLog(gw.backlog, gw.access, request_id(request.headers), spec.dialect.name, trace)
    return Exchange(request, spec, gw, gw.gen, log, spec.dialect, trace)


async def edge(ex: Exchange) -> web.StreamResponse:
    """Runs the steps; maps what escapes them, once, into the answer (or the log line) it calls for."""
    gw, log = ex.gw, ex.log
    task = asyncio.current_task()
    assert task is not None  # aiohttp runs every handler in a task
    gw.in_flight.began(task)
    try:
        return await steps(ex)
    except GatewayError as err:
        log.failed(err)
        return await answer(ex, error_response(ex.dialect, err, log.rid))
    except asyncio.CancelledError:
        if gw.draining and not log.error and log.ttfb is None:  # cut at the drain's end, nothing sent yet
            cut = shutting_down()
            log.failed(cut)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await answer(ex, error_response(ex.dialect, cut, log.rid))
        elif not log.error:
            log.gone()  # the client went away, or aiohttp cancelled the handler: nothing to answer
        raise
    except ConnectionResetError:
        log.gone()  # the client went away mid-answer: nothing left to answer; the log line says so
        raise
    except Exception:
        return await answer(ex, error_response(ex.dialect, internal_error(log, "serving"), log.rid))
    finally:
        if ex.load is not None:
            ex.load.in_flight.n -= 1
        gw.in_flight.ended(task)
        log.close()


def shutting_down() -> ShuttingDown:
    """The 503 of a request the drain will not serve; the connection it came on closes after it."""
    err = ShuttingDown("the gateway is shutting down: retry the request")
    err.headers["Connection"] = "close"
    return err


async def steps(ex: Exchange) -> web.StreamResponse:
    if ex.gw.draining:  # on a keep-alive connection opened before the signal: told now, not at the drain's end
        raise shutting_down()
    await read(ex)
    await authenticate(ex)
    parse(ex)
    if ex.spec.kept:
        await recall(ex)
    choose(ex)
    await admit(ex)
    try:
        # no queue configured: no more work; a free slot that needs no call: no ticket and no await
        if (fq := ex.gw.fair.queues.get(ex.route.label)) is not None and not at_once(ex, fq):
            await queue(ex, fq)
        return await call(ex)
    finally:
        settle(ex)


async def read(ex: Exchange) -> None:
    """The body, read within its caps and decoded once; its keys and the SDK's headers refine the
    dialect (``/v1/...`` serves several SDKs)."""
    try:
        ex.data = data = loads(await read_body(ex.request))
    except GatewayError:
        # no body to tell the SDK by: its headers alone pick the envelope of the refusal
        ex.dialect = ex.dialect.select({}, ex.request.headers)
        raise
    ex.dialect = ex.dialect.select(data, ex.request.headers)
    ex.log.dialect = ex.dialect.name


async def authenticate(ex: Exchange) -> None:
    token, team = credentials(ex.dialect, ex.request.headers)
    ex.principal = ex.log.principal = await ex.gen.auth.authenticate(token, team)


def parse(ex: Exchange) -> None:
    """The body validated by the caller's codec into one frozen ``InternalRequest``."""
    ex.ireq = ex.dialect.parse(ex.spec.operation, ex.data, ex.spec.flavour)
    ex.log.model = ex.ireq.model


async def recall(ex: Exchange) -> None:
    """A stored chain's turns put before this one's input (Responses' ``previous_response_id``)."""
    ex.ireq = await ex.gw.conversations.recall(ex.principal.team, ex.ireq)


async def keep(ex: Exchange) -> None:
    """The answer stored for later requests, before the client has its end (``RouteSpec.kept``)."""
    if ex.spec.kept:
        await ex.gw.conversations.keep(ex.principal.team, ex.ireq)


def choose(ex: Exchange) -> None:
    """The model's route (its targets), counted in the model's levels; the team's allow-list; a LoRA
    adapter named in the model name."""
    resolved = ex.gen.models.resolve(ex.ireq.model)
    ex.route = resolved.route
    check_kind(resolved.route, ex.ireq.operation)
    ex.log.model_label = resolved.route.label
    ex.load = ex.gw.load.of(resolved.route.label)
    ex.load.in_flight.n += 1
    ex.gen.model_access.check(ex.principal, ex.ireq.model)
    if resolved.adapter is not None and ex.ireq.adapter is None:
        features = ex.ireq.features | {Feature.ADAPTER}
        # the client's field is the model's name (SGP's vendor/model/deployment), never an "adapter"
        fields = {**ex.ireq.fields, Feature.ADAPTER: "model"}
        reasons = {**ex.ireq.reasons, Feature.ADAPTER: f"it names the adapter {resolved.adapter!r}"}
        ex.ireq = dataclasses.replace(
            ex.ireq, adapter=resolved.adapter, features=features, fields=fields, reasons=reasons
        )


async def admit(ex: Exchange) -> None:
    """The request's deadline, then every applicable limit (``gateway.limits.admission``)."""
    principal, gen, route, ireq = ex.principal, ex.gen, ex.route, ex.ireq
    admission = ex.gw.admission
    ex.deadline = admission.deadline_for(principal.team, ireq, gen.policies)
    # an unlimited team's plan at once; traced, admission keeps its span
    plan = None if ex.trace is not None else admission.unlimited(principal.team, principal.key_id, ireq, gen.policies)
    if plan is None:
        ask = Ask(
            principal.team, principal.key_id, ireq, ex.deadline, ex.load, gen.policies, route.label, route.upstreams
        )
        admitting = admission.admit(ask)
        plan = await (admitting if ex.trace is None else ex.trace.admitted(admitting, principal.team))
    ex.plan = plan
    if plan.layout.hard:  # the answer's length its worst case counted, where the client set none
        ex.ireq = bounded(ireq)
    if plan.over is not None:
        ex.log.budget_exceeded = plan.over.scope


def at_once(ex: Exchange, fq: ModelQueue) -> bool:
    """Step ``queue`` for a slot free at once with no call (``ModelQueue.at_once``); untraced only (a
    traced request's queue span comes from ``queue``)."""
    if ex.trace is not None:
        return False
    policy, principal = ex.gw.fair.policy, ex.principal
    asked = policy.asked(ex.request.headers.getall(PRIORITY_HEADER, []))
    ex.slot = fq.at_once(policy.rank(principal.team, principal.key_id, asked))
    return ex.slot is not None


async def queue(ex: Exchange, fq: ModelQueue) -> None:
    """Step ``queue``: a slot of the model's capacity, at once when one is free, else in its fair turn
    (``gateway.limits.fairq``); the wait goes to the trace."""
    policy, principal = ex.gw.fair.policy, ex.principal
    asked = policy.asked(ex.request.headers.getall(PRIORITY_HEADER, []))
    # its own id in the queue: a client's X-Request-Id may repeat
    ticket = policy.ticket(f"{getrandbits(64):016x}", principal.team, principal.key_id, asked, ex.deadline)
    route, models = ex.route, ex.gen.models
    entering = fq.enter(ticket, lambda: models.down(route))
    ex.slot = await (entering if ex.trace is None else ex.trace.queued(entering, ticket.cls))


async def call(ex: Exchange) -> web.StreamResponse:
    """The upstream call (``gateway.routing.dispatch``: target order, feature fit, fallbacks before the
    first byte); then the stream relayed, or the whole answer rendered."""
    route, ireq, log = ex.route, ex.ireq, ex.log
    headers, team = ex.request.headers, ex.gen.policies.teams.get(ex.principal.team)
    call = Call(
        log.rid,
        ex.deadline,
        route.upstream_model,
        headers.get(SESSION_HEADER),
        ttft=team.ttft if team is not None else None,
        resume=resume.wanted(headers.get(resume.HEADER)),
    )
    log.progress = call.progress  # what its calls reported, should it end without an answer
    if ireq.stream:
        opened = await dispatch.open_stream(ex.gen.models, route, ireq, call, log.attempt)
        log.observe(opened[0].events)
        return await relay(ex, opened)
    completion = await dispatch.complete(ex.gen.models, route, ireq, call, log.attempt)
    log.completed(completion)
    body = dumps(ex.dialect.render(ireq, completion))
    await keep(ex)
    return await answer(ex, web.Response(body=body, content_type="application/json", headers=ex.reply_headers({})))


async def relay(ex: Exchange, opened: tuple[Batch, AsyncIterator[Batch]]) -> web.StreamResponse:
    """Step ``relay``: the stream's events encoded in the client's dialect as they come
    (``gateway.web.relay`` decides the sends); after the head has gone out, every error ends the
    stream in-band, the dialect's way."""
    first, events = opened
    log = ex.log
    log.first_byte()
    encoder = ex.dialect.encoder(ex.ireq)
    resp = EventStream(headers=ex.reply_headers(SSE_HEADERS))  # its head leaves with the first events
    await resp.prepare(ex.request)
    writer = Relay(resp, encoder, log)
    failed = True
    try:
        await writer.run(first, events, ex.gw.in_flight.busy)
        tail = writer.out + encoder.end()
        failed = False
        await keep(ex)
    except GatewayError as err:
        log.failed(err)
        tail = writer.out + encoder.error(err)  # first events held for the rest of their read go first
    except ConnectionResetError:
        # The client went away mid-stream: a normal end for a stream, not a server error (aiohttp
        # logs an exception that escapes the handler with its traceback, and answers 500 to no one).
        log.gone()
        return resp
    except asyncio.CancelledError:
        await cut_short(ex, resp, writer.out, encoder)
        raise
    except Exception:  # a fault of ours after the head went out: the stream still ends in its dialect
        tail = writer.out + encoder.error(internal_error(log, "relaying"))
    finally:
        # On client disconnect this runs during cancellation and closes the upstream request.
        await events.aclose()  # type: ignore[attr-defined]
    try:
        await (cut_after(ex, resp, tail) if failed and encoder.cut_after_error else resp.write_eof(tail))
    except ConnectionResetError:  # gone just before the end
        log.gone()
    return resp


async def cut_after(ex: Exchange, resp: web.StreamResponse, tail: bytes) -> None:
    """The stream's last bytes (its error), then the connection closed before HTTP's last chunk: the
    body ends unfinished, which every HTTP client raises on (``StreamEncoder.cut_after_error``).
    aiohttp's own end of the answer then finds the connection closing, which it takes as a client gone."""
    await resp.write(tail)
    if ex.request.transport is not None:
        ex.request.transport.close()  # sends what is buffered first


async def cut_short(ex: Exchange, resp: web.StreamResponse, out: bytes, encoder: StreamEncoder) -> None:
    """A stream cancelled: cut at the drain's end (it ends in error, not cleanly), or its client gone."""
    if not ex.gw.draining:
        ex.log.gone()
        return
    cut = ShuttingDown("the gateway is shutting down: the stream was cut; retry the request")
    ex.log.failed(cut)
    tail = out + encoder.error(cut)
    with contextlib.suppress(ConnectionError, RuntimeError):
        await (cut_after(ex, resp, tail) if encoder.cut_after_error else resp.write_eof(tail))


async def answer(ex: Exchange, resp: web.Response) -> web.Response:
    """Step ``answer``: sends ``resp`` now rather than after the handler returns: settling, metrics and
    the access log then run once the client has its answer, not before it."""
    if OVERHEAD_HEADER not in resp.headers:  # an error: every answer says the gateway's overhead
        resp.headers[OVERHEAD_HEADER] = f"{ex.log.overhead() * 1000:.3f}"
    try:
        await resp.prepare(ex.request)
        await resp.write_eof()
    except ConnectionResetError:  # the client went away before its answer
        ex.log.gone()
    # aiohttp keeps a connection's last response until its next request: an idle keep-alive
    # connection would hold the whole rendered answer (the sent bytes are the transport's now).
    resp.body = None
    return resp


def settle(ex: Exchange) -> None:
    """The model's slot given back; the limits settled with the real usage, once the answer is out
    (off the request path: the admission queues it); the request's cost goes to its record."""
    if ex.slot is not None:
        ex.slot.release()
    plan, log = ex.plan, ex.log
    assert plan is not None  # settle runs only after admit
    prompt, completion_tokens = log.usage(plan)
    target = log.attempt.target or ""
    prices = ex.gen.policies.prices
    embedding = ex.ireq.operation is Operation.EMBEDDING
    log.cost = ex.gw.admission.release(
        plan,
        prompt,
        completion_tokens,
        log.cached_tokens,
        ex.route.label,
        target,
        prices,
        log.cache_write_tokens,
        embedding,
    )


def request_id(headers: Mapping[str, str]) -> str:
    given = headers.get("X-Request-Id", "")
    if 0 < len(given) <= 128 and given.isprintable() and given.isascii():
        return given
    # 128 random bits, as uuid4().hex carries; from the process's generator (reseeded in each forked
    # worker), not a getrandom() system call per request: an id needs uniqueness, not secrecy
    return f"{getrandbits(128):032x}"


def credentials(dialect: Dialect, headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    raw = headers.get(dialect.auth_header)
    token = bearer_token(raw) if dialect.auth_header == "authorization" else raw
    if raw is None and dialect.bearer_too:  # Anthropic's SDKs send x-api-key or, now, a bearer token
        token = bearer_token(headers.get("authorization"))
    team = headers.get(dialect.team_header) if dialect.team_header else None
    return token, team or None


def error_response(dialect: Dialect, err: GatewayError, rid: str) -> web.Response:
    reply = dialect.error(err)
    headers = {**id_headers(dialect, rid), **reply.headers}
    return web.Response(status=reply.status, body=dumps(reply.body), content_type="application/json", headers=headers)


def internal_error(log: RequestLog, doing: str) -> GatewayError:
    """A fault of ours, logged with its traceback (called in an ``except`` block) and answered as the
    client's dialect answers a server error, without the details."""
    FAULTS.exception(f"internal:{doing}", "unexpected error %s %s", doing, log.rid)
    err = GatewayError("internal error in the gateway")
    log.failed(err)
    return err

"""The request pipeline, in the order it runs:

    route → choose dialect → authenticate → parse → resolve model → model access → admit (limits)
    → call (fallbacks) → render

One handler per route-table entry, built once at start-up around its ``RouteSpec``. Every error is a
``GatewayError`` rendered in the dialect that is answering; once a stream has started, errors go out
in-band and the stream is ended the dialect's way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from random import getrandbits

from aiohttp import web

from gateway.core.errors import GatewayError, ShuttingDown
from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import LastBatch, SplitBatch, StreamEvent
from gateway.core.upstream import Call
from gateway.dialects.base import Dialect, bearer_token
from gateway.dialects.common import dumps, loads
from gateway.routing import dispatch
from gateway.routing.table import check_kind
from gateway.runtime.aiohttp_tuning import EventStream
from gateway.web.body import read_body
from gateway.web.record import InFlight, RequestLog
from gateway.web.state import GATEWAY

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
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
    team = headers.get(dialect.team_header) if dialect.team_header else None
    return token, team or None


def error_response(dialect: Dialect, err: GatewayError, rid: str) -> web.Response:
    reply = dialect.error(err)
    headers = {"X-Request-Id": rid, **reply.headers}
    return web.Response(status=reply.status, body=dumps(reply.body), content_type="application/json", headers=headers)


async def answer(request: web.Request, resp: web.Response, log: RequestLog) -> web.Response:
    """Sends ``resp`` now rather than after the handler returns: settling, metrics and the access log
    (the handler's ``finally`` blocks) then run once the client has its answer, not before it."""
    try:
        await resp.prepare(request)
        await resp.write_eof()
    except ConnectionResetError:  # the client went away before its answer
        log.gone()
    # aiohttp keeps a connection's last response until its next request: an idle keep-alive
    # connection would hold the whole rendered answer (the sent bytes are the transport's now).
    resp.body = None
    return resp


def internal_error(log: RequestLog, doing: str) -> GatewayError:
    """A fault of ours, logged with its traceback (called in an ``except`` block) and answered as the
    client's dialect answers a server error, without the details."""
    logging.getLogger("gateway").exception("unexpected error %s %s", doing, log.rid)
    err = GatewayError("internal error in the gateway")
    log.failed(err)
    return err


async def relay(
    request: web.Request,
    dialect: Dialect,
    ireq: InternalRequest,
    opened: tuple[list[StreamEvent], AsyncIterator[list[StreamEvent]]],
    rid: str,
    log: RequestLog,
    before_end: Callable[[], Awaitable[None]] | None = None,
) -> web.StreamResponse:
    """``before_end``: awaited once the stream's end is encoded, before it is sent (what the end
    reports is stored by then)."""
    first, events = opened
    log.first_byte()
    headers = {**SSE_HEADERS, "X-Request-Id": rid, OVERHEAD_HEADER: f"{log.overhead() * 1000:.3f}"}
    if log.budget_exceeded:
        headers[BUDGET_HEADER] = log.budget_exceeded
    encoder = dialect.encoder(ireq)
    resp = EventStream(headers=headers)  # its head leaves with the first events
    await resp.prepare(request)
    try:
        out = b"".join([encoder.event(ev) for ev in first])  # what is encoded and not yet written
        if not isinstance(first, LastBatch):
            if not (isinstance(first, SplitBatch) and request.app[GATEWAY].in_flight.busy()):
                await resp.write(out)  # the head goes out with it (alone, if the first events wrote nothing)
                out = b""
            async for batch in events:
                if len(batch) == 1 and type(token := batch[0]) is bytes and type(batch) is list:
                    # a token's event relayed as it was read (a Token): most of a model server's stream
                    log.token()
                    await resp.write(out + encoder.event(token))
                    out = b""
                    continue
                log.observe(batch)
                # most batches of a model server's stream are one token's event
                out += encoder.event(batch[0]) if len(batch) == 1 else b"".join([encoder.event(ev) for ev in batch])
                if isinstance(batch, LastBatch):
                    break  # written with the stream's end
                if out:
                    await resp.write(out)
                    out = b""
        tail = out + encoder.end()
        if before_end is not None:
            await before_end()
    except GatewayError as err:
        log.failed(err)
        tail = out + encoder.error(err)  # first events held for the rest of their read go first
    except ConnectionResetError:
        # The client went away mid-stream: a normal end for a stream, not a server error (aiohttp
        # logs an exception that escapes the handler with its traceback, and answers 500 to no one).
        log.gone()
        return resp
    except asyncio.CancelledError:
        if request.app[GATEWAY].draining:  # cut at the drain's end: the stream ends in error, not cleanly
            cut = ShuttingDown("the gateway is shutting down: the stream was cut; retry the request")
            log.failed(cut)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await resp.write_eof(out + encoder.error(cut))
        else:
            log.gone()
        raise
    except Exception:  # a fault of ours after the head went out: the stream still ends in its dialect
        tail = out + encoder.error(internal_error(log, "relaying"))
    finally:
        # On client disconnect this runs during cancellation and closes the upstream request.
        await events.aclose()  # type: ignore[attr-defined]
    try:
        await resp.write_eof(tail)  # the stream's end and the body's end in one write
    except ConnectionResetError:  # gone just before the end
        log.gone()
    return resp


def make_handler(spec: RouteSpec, requests: InFlight) -> Handler:
    in_flight = requests.level(spec.dialect.name)  # the route's dialect: counted before it is refined

    async def handle(request: web.Request) -> web.StreamResponse:
        gw = request.app[GATEWAY]
        gen = gw.gen  # this request's config generation, whatever a reload swaps in meanwhile
        rid = request_id(request.headers)
        dialect = spec.dialect
        tracer = gw.tracer  # None unless tracing is configured: then nothing of it runs
        trace = None if tracer is None else tracer.begin(request.headers, spec.method, spec.path, spec.operation)
        log = RequestLog(gw.backlog, gw.access, rid, dialect.name, trace)
        load = None  # the model's levels, once it is known
        in_flight.n += 1
        task = asyncio.current_task()
        assert task is not None  # aiohttp runs every handler in a task
        gw.in_flight.began(task)
        try:
            data = loads(await read_body(request))
            dialect = dialect.select(data, request.headers)
            log.dialect = dialect.name
            token, team = credentials(dialect, request.headers)
            principal = await gen.auth.authenticate(token, team)
            log.principal = principal
            ireq = dialect.parse(spec.operation, data, spec.flavour)
            log.model = ireq.model
            if spec.kept:  # a stored chain's turns go before this one's input
                ireq = await gw.conversations.recall(principal.team, ireq)
            resolved = gen.models.resolve(ireq.model)
            check_kind(resolved.route, ireq.operation)
            log.model_label = resolved.route.label
            load = gw.load.of(resolved.route.label)
            load.in_flight.n += 1
            gen.model_access.check(principal, ireq.model)
            if resolved.adapter is not None and ireq.adapter is None:
                ireq = dataclasses.replace(ireq, adapter=resolved.adapter, features=ireq.features | {Feature.ADAPTER})
            deadline = gw.admission.deadline_for(principal.team, ireq, gen.policies)
            route = resolved.route
            admitting = gw.admission.admit(
                principal.team,
                principal.key_id,
                ireq,
                deadline,
                load,
                gen.policies,
                model=route.label,
                targets=route.upstreams,
            )
            plan = await (admitting if trace is None else trace.admitted(admitting, principal.team))
            if plan.over is not None:
                log.budget_exceeded = plan.over.scope
            try:
                call = Call(rid, deadline, resolved.route.upstream_model, request.headers.get(SESSION_HEADER))
                keep = functools.partial(gw.conversations.keep, principal.team, ireq) if spec.kept else None
                if ireq.stream:
                    opened = await dispatch.open_stream(gen.models, resolved.route, ireq, call, log.attempt)
                    log.observe(opened[0])
                    return await relay(request, dialect, ireq, opened, rid, log, keep)
                completion = await dispatch.complete(gen.models, resolved.route, ireq, call, log.attempt)
                log.completed(completion)
                body = dumps(dialect.render(ireq, completion))
                if keep is not None:
                    await keep()
                headers = {"X-Request-Id": rid, OVERHEAD_HEADER: f"{log.overhead() * 1000:.3f}"}
                if log.budget_exceeded:
                    headers[BUDGET_HEADER] = log.budget_exceeded
                return await answer(
                    request, web.Response(body=body, content_type="application/json", headers=headers), log
                )
            finally:
                prompt, completion_tokens = log.usage(plan)
                target = log.attempt.target or ""
                log.cost = gw.admission.release(
                    plan, prompt, completion_tokens, log.cached_tokens, route.label, target, gen.policies.prices
                )
        except GatewayError as err:
            log.failed(err)
            return await answer(request, error_response(dialect, err, rid), log)
        except asyncio.CancelledError:
            if gw.draining and not log.error and log.ttfb is None:  # cut at the drain's end, nothing sent yet
                cut = ShuttingDown("the gateway is shutting down: retry the request")
                log.failed(cut)
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await answer(request, error_response(dialect, cut, rid), log)
            elif not log.error:
                log.gone()  # the client went away, or aiohttp cancelled the handler: nothing to answer
            raise
        except ConnectionResetError:
            log.gone()  # the client went away mid-answer: nothing left to answer; the log line says so
            raise
        except Exception:
            return await answer(request, error_response(dialect, internal_error(log, "serving"), rid), log)
        finally:
            in_flight.n -= 1
            if load is not None:
                load.in_flight.n -= 1
            gw.in_flight.ended(task)
            log.close()

    return handle

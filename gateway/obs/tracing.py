"""Request traces with OpenTelemetry, exported over OTLP/HTTP: the optional ``tracing`` extra.

One server span per request (its parent the client's W3C ``traceparent``, if any), a child span for
admission (the wait for a slot), one client span per upstream attempt (a fallback is a second one,
the first marked failed) whose context goes upstream as ``traceparent``/``tracestate`` so that a vLLM
started with ``--otlp-traces-endpoint`` adds its spans to the same trace, and a ``first_token`` event.
Attributes follow the GenAI semantic conventions (``gen_ai.*``), plus team and dialect. Prompts,
completions, keys and error messages (which may quote the request back) never become attributes.

Without a ``tracing`` section in the config nothing here runs: the app holds no ``Tracer`` and the
pipeline's one check finds ``None``. With it, the SDK is imported once at start-up; a missing extra
is a config error there. Spans are exported by the SDK's batch processor in its own thread, never on
the event loop. What does not belong here: metrics (``metrics.py``) and log lines (``logs.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.core.errors import GatewayError
from gateway.core.request import Operation
from gateway.core.response import Completion, Finish, StreamEvent, StreamStart
from gateway.core.upstream import Call, Upstream
from gateway.runtime.config import ConfigError, TracingConfig

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span
    from opentelemetry.trace import Tracer as OTelTracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

T = TypeVar("T")
log = logging.getLogger("gateway.tracing")
EXPORT_SECONDS = 5.0  # one export's HTTP call to the collector
CLOSE_SECONDS = 2.0  # what shutting down waits for the last spans, whatever the collector does
# gen_ai.operation.name's well-known values (semantic conventions, GenAI spans)
OPERATION = {Operation.CHAT: "chat", Operation.COMPLETION: "text_completion", Operation.EMBEDDING: "embeddings"}
# openai.api.type (the OpenAI conventions): which of OpenAI's APIs a chat came in by. A Responses call
# is a chat by gen_ai.operation.name (a well-known value that applies MUST be used); this names it.
OPENAI_API = {"/v1/chat/completions": "chat_completions", "/v1/responses": "responses"}


class Tracer:
    """The app's tracer: one ``TracerProvider`` of its own (not the process-global one), its
    sampler parent-based with a ratio for traces that start here."""

    def __init__(self, settings: TracingConfig) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as exc:
            raise ConfigError(f"tracing needs the optional extra: pip install 'llm-gateway[tracing]' ({exc})") from None
        self.provider: TracerProvider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(settings.sampling_ratio)),
            resource=Resource.create({"service.name": settings.service_name}),
            shutdown_on_exit=False,  # ``close`` does it, bounded; an exit hook would wait on the collector unbounded
        )
        exporter = OTLPSpanExporter(endpoint=settings.endpoint, timeout=EXPORT_SECONDS)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer: OTelTracer = self.provider.get_tracer("llm-gateway")
        self.propagator: TraceContextTextMapPropagator = TraceContextTextMapPropagator()
        self.trace = trace  # the API module: span kinds, statuses, contexts
        log.info(
            "tracing on: spans to %s (OTLP/HTTP), service %s, %g%% of the traces begun here sampled",
            settings.endpoint,
            settings.service_name,
            settings.sampling_ratio * 100,
        )

    def begin(self, headers: Mapping[str, str], method: str, path: str, operation: Operation) -> RequestTrace:
        """A request's server span, child of the client's ``traceparent`` when it sent one."""
        parent = self.propagator.extract(headers)
        name = OPERATION[operation]
        attributes = {"http.request.method": method, "http.route": path, "gen_ai.operation.name": name}
        if path in OPENAI_API:
            attributes["openai.api.type"] = OPENAI_API[path]
        span = self.tracer.start_span(
            f"{method} {path}", context=parent, kind=self.trace.SpanKind.SERVER, attributes=attributes
        )
        return RequestTrace(self, span, name)

    async def close(self) -> None:
        """Exports what is left, for at most ``CLOSE_SECONDS``: a collector that accepts and never
        answers must not hold the process's exit past its grace period. The exporter's HTTP call
        blocks, so it runs off the loop, in a daemon thread that exit does not wait for (a worker
        of ``asyncio.to_thread`` would be joined at exit)."""
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def shut() -> None:
            try:
                self.provider.shutdown()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop ended first: nobody waits any more
                    loop.call_soon_threadsafe(done.set)

        threading.Thread(target=shut, name="tracing-shutdown", daemon=True).start()
        try:
            await asyncio.wait_for(done.wait(), CLOSE_SECONDS)
        except TimeoutError:
            log.warning("the trace collector took more than %g s: the last spans were not exported", CLOSE_SECONDS)


class RequestTrace:
    """One request's spans, filled in as the pipeline runs; ``end`` closes them all."""

    __slots__ = ("attempt", "finish_reasons", "operation", "owner", "response_model", "server", "within")

    def __init__(self, owner: Tracer, server: Span, operation: str) -> None:
        self.owner = owner
        self.server = server
        self.operation = operation
        self.within: Context = owner.trace.set_span_in_context(server)
        self.attempt: Span | None = None  # the upstream attempt under way, or the one that answered
        self.response_model: str | None = None
        self.finish_reasons: list[str] = []

    def _child(self, name: str, kind: Any, attributes: dict[str, Any]) -> Span:
        return self.owner.tracer.start_span(name, context=self.within, kind=kind, attributes=attributes)

    def _failed(self, span: Span, err: BaseException) -> None:
        code = err.code if isinstance(err, GatewayError) else type(err).__name__
        span.set_attribute("error.type", code)
        span.set_status(self.owner.trace.Status(self.owner.trace.StatusCode.ERROR, code))

    async def admitted(self, admission: Coroutine[Any, Any, T], team: str) -> T:
        """``admission`` awaited inside its span: the time to a slot, and a refusal's code."""
        span = self._child("gateway.admission", self.owner.trace.SpanKind.INTERNAL, {"gateway.team": team})
        try:
            return await admission
        except BaseException as exc:
            self._failed(span, exc)
            raise
        finally:
            span.end()

    async def queued(self, entering: Coroutine[Any, Any, T], cls: str) -> T:
        """``entering`` (a model's queue) awaited inside its span: the time to a slot, a shed's code."""
        span = self._child("gateway.queue", self.owner.trace.SpanKind.INTERNAL, {"gateway.queue.class": cls})
        began = time.monotonic()
        try:
            return await entering
        except BaseException as exc:
            self._failed(span, exc)
            raise
        finally:
            span.set_attribute("gateway.queue.wait_seconds", time.monotonic() - began)
            span.end()

    def calling(self, upstream: Upstream, n: int, call: Call) -> Call:
        """Try ``n`` of the request begins its span; ``call`` as it goes upstream carries its context."""
        self.ended()
        attributes: dict[str, Any] = {"gen_ai.provider.name": upstream.provider, "gateway.target": upstream.name}
        attributes["gateway.attempt"] = n
        # the upstream's model name: chosen by routing, else the target's own (HTTP targets, pools)
        model = call.model or getattr(upstream, "model", None)
        if isinstance(model, str) and model:
            attributes["gen_ai.request.model"] = model
        # named as the GenAI conventions name a client span: "{operation} {model}"
        name = f"{self.operation} {model or upstream.name}"
        self.attempt = span = self._child(name, self.owner.trace.SpanKind.CLIENT, attributes)
        carrier: dict[str, str] = {}
        self.owner.propagator.inject(carrier, context=self.owner.trace.set_span_in_context(span))
        return dataclasses.replace(call, trace=tuple(carrier.items()))

    def call_failed(self, err: GatewayError) -> None:
        if self.attempt is not None:
            self._failed(self.attempt, err)
            self.ended()

    def ended(self) -> None:
        """The attempt's span ends: a failed one, a whole answer, or (from ``end``) a stream."""
        if self.attempt is not None:
            self.attempt.end()
            self.attempt = None

    def first_token(self) -> None:
        self.server.add_event("first_token")

    def event(self, event: StreamEvent) -> None:
        """A stream's identity and finishes (not its text)."""
        if isinstance(event, StreamStart):
            self.response_model = event.model
        elif isinstance(event, Finish):
            self.finish_reasons.append(event.reason)

    def completed(self, completion: Completion) -> None:
        self.response_model = completion.model
        self.finish_reasons = [c.finish_reason for c in completion.choices if c.finish_reason is not None]

    def end(self, fields: Mapping[str, Any], status: int, err: str | None) -> None:
        """The request is over: ``fields`` (its record's, ``None`` values left out) on the server span,
        marked failed as the HTTP conventions mark server spans: not for the client's own errors."""
        self.ended()
        span = self.server
        span.set_attributes({k: v for k, v in fields.items() if v is not None})
        if self.response_model:
            span.set_attribute("gen_ai.response.model", self.response_model)
        if self.finish_reasons:
            span.set_attribute("gen_ai.response.finish_reasons", self.finish_reasons)
        span.set_attribute("http.response.status_code", status)
        if err is not None:
            span.set_attribute("error.type", err)
            # a server-side status, or a stream that broke after its 200 (not one the client left)
            if status >= 500 or (status < 400 and err != "client_gone"):
                span.set_status(self.owner.trace.Status(self.owner.trace.StatusCode.ERROR, err))
        span.end()


def build(settings: TracingConfig | None) -> Tracer | None:
    return Tracer(settings) if settings is not None else None

"""Structured logs: one JSON line per request, written off the event loop.

``RequestLog`` gathers the fields of one request as the data path runs (dialect, team, model,
target, status, tokens, timings). Records go through a ``QueueHandler`` so the loop only enqueues;
a listener thread formats and writes them. Keys, prompts and completions never enter a record.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import sys
import time
from typing import Any

from gateway import metrics as m
from gateway.auth import Principal
from gateway.core.errors import GatewayError
from gateway.core.response import Completion, Delta, StreamEvent, UsageReport
from gateway.dispatch import Attempt
from gateway.limits.plan import Plan


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if fields is not None:
            out.update(fields)
        else:
            out["msg"] = record.getMessage()
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, separators=(",", ":"), default=str)


def configure(level: str = "INFO") -> logging.handlers.QueueListener:
    q: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(JsonFormatter())
    listener = logging.handlers.QueueListener(q, stream, respect_handler_level=False)
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(q)]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    listener.start()
    return listener


_SERIES: dict[tuple[str, ...], tuple[Any, Any, Any]] = {}


class RequestLog:
    """The record of one request, filled in as the data path runs; ``emit`` writes its log line and
    its metrics (``gateway.metrics``) in one place, after the answer has gone out."""

    __slots__ = (
        "attempt",
        "chunks",
        "completion_tokens",
        "dialect",
        "error",
        "last_chunk",
        "logger",
        "model",
        "model_label",
        "principal",
        "prompt_tokens",
        "rid",
        "started",
        "status",
        "streamed",
        "ttfb",
        "ttft",
    )

    def __init__(self, logger: logging.Logger, rid: str, dialect: str) -> None:
        self.logger = logger
        self.rid = rid
        self.dialect = dialect
        self.started = time.perf_counter()
        self.attempt = Attempt()
        self.principal: Principal | None = None
        self.model: str | None = None
        self.model_label = "-"
        self.status = 200
        self.error: str | None = None
        self.ttfb: float | None = None
        self.ttft: float | None = None
        self.last_chunk = 0.0
        self.chunks = 0
        self.streamed = 0
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None

    def first_byte(self) -> None:
        self.ttfb = time.perf_counter() - self.started

    def overhead(self) -> float:
        """Our own time so far: everything but the wait on upstreams (up to the first byte, for streams)."""
        upto = self.ttfb if self.ttfb is not None else time.perf_counter() - self.started
        return max(0.0, upto - self.attempt.upstream_seconds)

    def observe(self, event: StreamEvent) -> None:
        if isinstance(event, Delta):
            now = time.perf_counter()
            if self.ttft is None:
                self.ttft = now - self.started
            self.chunks += 1
            self.streamed += len(event.token_ids) or 1
            self.last_chunk = now
        elif isinstance(event, UsageReport):
            self.prompt_tokens = event.usage.prompt_tokens
            self.completion_tokens = event.usage.completion_tokens

    def completed(self, completion: Completion) -> None:
        if completion.usage is not None:
            self.prompt_tokens = completion.usage.prompt_tokens
            self.completion_tokens = completion.usage.completion_tokens

    def usage(self, plan: Plan) -> tuple[int | None, int | None]:
        """Tokens to settle: the upstream's own count; for a stream cut short (client gone, upstream
        broke off) the tokens streamed so far and the prompt's estimate."""
        if self.completion_tokens is not None or not self.streamed:
            return self.prompt_tokens, self.completion_tokens
        return plan.prompt_estimate, self.streamed

    def failed(self, err: GatewayError) -> None:
        if self.ttfb is None:
            self.status = err.status
        self.error = err.code

    def gone(self) -> None:
        self.error = "client_gone"

    def emit(self) -> None:
        duration = time.perf_counter() - self.started
        self._metrics(duration)
        if not self.logger.isEnabledFor(logging.INFO):
            return
        fields: dict[str, object] = {
            "event": "request",
            "request_id": self.rid,
            "dialect": self.dialect,
            "team": self.principal.team if self.principal else None,
            "key_id": self.principal.key_id if self.principal else None,
            "model": self.model,
            "target": self.attempt.target,
            "provider": self.attempt.provider,
            "tries": self.attempt.tries,
            "status": self.status,
            "error": self.error,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "duration_ms": round(duration * 1000, 3),
            "ttfb_ms": round(self.ttfb * 1000, 3) if self.ttfb is not None else None,
            "overhead_ms": round(self.overhead() * 1000, 3),
        }
        if self.attempt.dropped:
            fields["dropped"] = [f.value for f in self.attempt.dropped]
        self.logger.info("request", extra={"fields": fields})

    def _metrics(self, duration: float) -> None:
        model, team = self.model_label, self.principal.team if self.principal else "-"
        provider = self.attempt.provider or "-"
        outcome = m.outcome(self.status, self.error)
        key = (self.dialect, model, provider, team, outcome)
        series = _SERIES.get(key)
        if series is None:
            # labels() costs a lock and a dict walk per call: resolve each (bounded) label set once.
            series = _SERIES[key] = (
                m.REQUESTS.labels(*key),
                m.DURATION.labels(self.dialect, model),
                m.OVERHEAD_SECONDS.labels(self.dialect),
            )
        series[0].inc()
        series[1].observe(duration)
        series[2].observe(self.overhead())
        if self.ttft is not None:
            m.TTFT.labels(self.dialect, model).observe(self.ttft)
            if self.chunks > 1:
                m.INTER_TOKEN.labels(model).observe((self.last_chunk - self.started - self.ttft) / (self.chunks - 1))
        if self.prompt_tokens is not None:
            m.TOKENS.labels(model, team, "prompt").inc(self.prompt_tokens)
        if self.completion_tokens is not None:
            m.TOKENS.labels(model, team, "completion").inc(self.completion_tokens)
        if self.attempt.tries > 1:
            m.RETRIES.labels(model).inc(self.attempt.tries - 1)
        for target in self.attempt.cooled:
            m.COOLDOWNS.labels(target).inc()
        for feature in self.attempt.dropped:
            m.DROPPED.labels(self.attempt.target or "-", feature.value).inc()

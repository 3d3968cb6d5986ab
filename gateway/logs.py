"""Structured logs: one JSON line per request, written off the event loop.

``RequestLog`` gathers the fields of one request as the data path runs (dialect, team, model,
target, status, tokens, timings). Keys, prompts and completions never enter a record.

One writer thread formats and writes every line. The request line skips ``logging`` on the hot path:
the loop puts ``(time, fields)`` on the writer's queue (a ``LogRecord``, its handler locks and the
``QueueHandler``'s copy cost more than the rest of the line's work); other log calls reach the same
queue through a ``QueueHandler``, so the two kinds of line never interleave. Until ``configure`` runs
(an app embedded in tests), request lines go through the ``gateway.access`` logger instead.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import queue
import sys
import threading
import time
from typing import Any, TextIO, cast

import pydantic_core

from gateway import metrics as m
from gateway.auth import Principal
from gateway.core.errors import GatewayError
from gateway.core.response import Completion, Delta, StreamEvent, UsageReport
from gateway.dispatch import Attempt
from gateway.limits.plan import Plan

ACCESS_LOGGER = "gateway.access"
_STOP = object()
WRITE_BATCH = 256
_queue: queue.SimpleQueue[object] | None = None  # the writer's, once ``configure`` has run


def _json(out: dict[str, Any]) -> str:
    return pydantic_core.to_json(out, fallback=str).decode()


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
        return _json(out)


class LogWriter:
    """The thread that formats and writes log lines, flushing when its queue runs dry."""

    def __init__(self, q: queue.SimpleQueue[object], stream: TextIO) -> None:
        self.queue, self.stream = q, stream
        self.formatter = JsonFormatter()
        self.thread = threading.Thread(target=self._run, name="log-writer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        global _queue
        if _queue is self.queue:
            _queue = None
        self.queue.put(_STOP)
        self.thread.join()

    def _line(self, item: object) -> str:
        if isinstance(item, logging.LogRecord):
            return self.formatter.format(item)
        created, fields = cast(tuple[float, dict[str, object]], item)
        return _json({"ts": round(created, 3), "level": "info", "logger": ACCESS_LOGGER, **fields})

    def _run(self) -> None:
        while True:
            items = [self.queue.get()]
            while len(items) < WRITE_BATCH and not self.queue.empty():
                items.append(self.queue.get_nowait())  # what queued meanwhile goes out in one write
            lines = []
            for item in items:
                if item is _STOP:
                    break
                try:
                    lines.append(self._line(item))
                except Exception as exc:  # a bad record must not end logging
                    lines.append(_json({"level": "error", "msg": f"log line dropped: {type(exc).__name__}"}))
            if lines:
                with contextlib.suppress(OSError, ValueError):  # stderr closed: nothing left to tell
                    self.stream.write("\n".join(lines) + "\n")
                    self.stream.flush()
            if len(lines) < len(items):
                return


def configure(level: str = "INFO", stream: TextIO | None = None) -> LogWriter:
    global _queue
    q: queue.SimpleQueue[object] = queue.SimpleQueue()
    writer = LogWriter(q, stream or sys.stderr)
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(q)]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    writer.start()
    _queue = q
    return writer


class _Series:
    """The labelled children of one (bounded) label set, resolved once: ``labels()`` costs a lock and a
    dict walk per call."""

    __slots__ = ("completion_tokens", "duration", "inter_token", "overhead", "prompt_tokens", "requests", "ttft")

    def __init__(self, dialect: str, model: str, provider: str, team: str, outcome: str) -> None:
        self.requests = m.REQUESTS.labels(dialect, model, provider, team, outcome)
        self.duration = m.DURATION.labels(dialect, model)
        self.overhead = m.OVERHEAD_SECONDS.labels(dialect)
        self.ttft = m.TTFT.labels(dialect, model)
        self.inter_token = m.INTER_TOKEN.labels(model)
        self.prompt_tokens = m.TOKENS.labels(model, team, "prompt")
        self.completion_tokens = m.TOKENS.labels(model, team, "completion")


_SERIES: dict[tuple[str, str, str, str, str], _Series] = {}


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
        if _queue is not None:
            _queue.put((time.time(), fields))
        else:
            self.logger.info("request", extra={"fields": fields})

    def _metrics(self, duration: float) -> None:
        model, team = self.model_label, self.principal.team if self.principal else "-"
        provider = self.attempt.provider or "-"
        outcome = m.outcome(self.status, self.error)
        key = (self.dialect, model, provider, team, outcome)
        series = _SERIES.get(key)
        if series is None:
            series = _SERIES[key] = _Series(*key)
        series.requests.inc()
        series.duration.observe(duration)
        series.overhead.observe(self.overhead())
        if self.ttft is not None:
            series.ttft.observe(self.ttft)
            if self.chunks > 1:
                series.inter_token.observe((self.last_chunk - self.started - self.ttft) / (self.chunks - 1))
        if self.prompt_tokens is not None:
            series.prompt_tokens.inc(self.prompt_tokens)
        if self.completion_tokens is not None:
            series.completion_tokens.inc(self.completion_tokens)
        if self.attempt.tries > 1:
            m.RETRIES.labels(model).inc(self.attempt.tries - 1)
        for target in self.attempt.cooled:
            m.COOLDOWNS.labels(target).inc()
        for feature in self.attempt.dropped:
            m.DROPPED.labels(self.attempt.target or "-", feature.value).inc()

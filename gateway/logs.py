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

from gateway.auth import Principal
from gateway.core.errors import GatewayError
from gateway.core.response import Completion, Delta, StreamEvent, UsageReport
from gateway.dispatch import Attempt


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


class RequestLog:
    __slots__ = (
        "attempt",
        "completion_tokens",
        "dialect",
        "error",
        "logger",
        "model",
        "principal",
        "prompt_tokens",
        "rid",
        "started",
        "status",
        "ttfb",
    )

    def __init__(self, logger: logging.Logger, rid: str, dialect: str) -> None:
        self.logger = logger
        self.rid = rid
        self.dialect = dialect
        self.started = time.perf_counter()
        self.attempt = Attempt()
        self.principal: Principal | None = None
        self.model: str | None = None
        self.status = 200
        self.error: str | None = None
        self.ttfb: float | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None

    def first_byte(self) -> None:
        self.ttfb = time.perf_counter() - self.started

    def observe(self, event: StreamEvent) -> None:
        if isinstance(event, UsageReport):
            self.prompt_tokens = event.usage.prompt_tokens
            self.completion_tokens = event.usage.completion_tokens
        elif isinstance(event, Delta) and self.ttfb is None:
            self.first_byte()

    def completed(self, completion: Completion) -> None:
        if completion.usage is not None:
            self.prompt_tokens = completion.usage.prompt_tokens
            self.completion_tokens = completion.usage.completion_tokens

    def failed(self, err: GatewayError) -> None:
        if self.ttfb is None:
            self.status = err.status
        self.error = err.code

    def emit(self) -> None:
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
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 3),
            "ttfb_ms": round(self.ttfb * 1000, 3) if self.ttfb is not None else None,
        }
        if self.attempt.dropped:
            fields["dropped"] = [f.value for f in self.attempt.dropped]
        self.logger.info("request", extra={"fields": fields})

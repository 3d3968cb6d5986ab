"""Structured logs: JSON lines written off the event loop by one writer thread.

One writer thread formats and writes every line, in batches. The loop never wakes it: a request's
line (``gateway.web.record``) is its whole dict of fields appended to a deque (the writer's Python
work takes the GIL from the loop on the same core, so it is one ``to_json`` a line and nothing more),
drained every ``FLUSH_SECONDS`` (sooner once ``WRITE_BATCH`` lines wait). Waking a thread per line
costs more than the rest of the request's logging (a futex wake and a GIL hand-off on a busy core);
a ``LogRecord`` with its handler locks costs more still, so the request line skips ``logging``.
Other log calls reach the same deque through a ``QueueHandler``, so the two kinds of line never
interleave. Until ``configure`` runs (an app embedded in tests), request lines go through the
``gateway.access`` logger instead. Lines wait at most ``FLUSH_SECONDS``; when stderr blocks for
long, lines past ``MAX_PENDING`` are counted and dropped rather than held without bound.

The writer is process-wide because the root logger is: ``configure`` runs once per process.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import logging.handlers
import sys
import threading
import traceback
from typing import Any, TextIO

import pydantic
import pydantic_core

ACCESS_LOGGER = "gateway.access"
WRITE_BATCH = 256
FLUSH_SECONDS = 0.05
MAX_PENDING = 100_000
_sink: LogSink | None = None  # the writer's, once ``configure`` has run


MAX_MESSAGE = 2000  # characters of a log message; a client's 5 MB model name must not make a 5 MB line
MAX_EXCEPTION_MESSAGE = 200  # characters of an exception's own message within a traceback


def _json(out: dict[str, Any]) -> str:
    return pydantic_core.to_json(out, fallback=str).decode()


def capped(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def exception_message(exc: BaseException) -> str:
    """What a logged exception may say of itself. A validation error's message quotes its input (a
    prompt, a completion), so only where it failed is kept; any other message is capped."""
    if isinstance(exc, pydantic.ValidationError):
        where = ["/".join(str(p) for p in e["loc"]) or "(root)" for e in exc.errors(include_input=False)[:5]]
        return f"{exc.error_count()} validation error(s) at {', '.join(where)}"
    return capped(str(exc), MAX_EXCEPTION_MESSAGE)


def traceback_text(exc: BaseException) -> str:
    """The traceback's frames as Python prints them, each exception's message through
    ``exception_message``; causes and contexts first, as Python orders them."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < 5:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    parts: list[str] = []
    for item in reversed(chain):
        frames = "".join(traceback.format_tb(item.__traceback__))
        kind = type(item).__qualname__
        parts.append(f"Traceback (most recent call last):\n{frames}{kind}: {exception_message(item)}")
    return "\n\nDuring handling of the above, another exception occurred:\n\n".join(parts)


class SafeFormatter(logging.Formatter):
    """Formats a record's message as the log line holds it: capped, and with a traceback that never
    quotes a request's content (``traceback_text``). The queue handler uses it, so what reaches the
    writer thread is already safe."""

    def format(self, record: logging.LogRecord) -> str:
        message = capped(record.getMessage(), MAX_MESSAGE)
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message}\n{traceback_text(record.exc_info[1])}"
        return message


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
            out["msg"] = capped(record.getMessage(), MAX_MESSAGE)
        if record.exc_info and record.exc_info[1] is not None:
            out["exc"] = traceback_text(record.exc_info[1])
        return _json(out)


class LogSink:
    """Where lines wait for the writer: appends from any thread (a deque's are atomic), no wake-ups
    but one per ``WRITE_BATCH`` lines. Also the ``QueueHandler``'s queue (``put_nowait``)."""

    __slots__ = ("dropped", "lines", "wake")

    def __init__(self) -> None:
        self.lines: collections.deque[object] = collections.deque()
        self.wake = threading.Event()
        self.dropped = 0

    def put(self, item: object) -> None:
        lines = self.lines
        n = len(lines)
        if n >= MAX_PENDING:
            self.dropped += 1
            return
        lines.append(item)
        if n == WRITE_BATCH:
            self.wake.set()

    put_nowait = put


class LogWriter:
    """The thread that formats and writes what the sink holds, every ``FLUSH_SECONDS``."""

    def __init__(self, sink: LogSink, stream: TextIO) -> None:
        self.sink, self.stream = sink, stream
        self.formatter = JsonFormatter()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="log-writer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        global _sink
        if _sink is self.sink:
            _sink = None
        self.stopping = True
        self.sink.wake.set()
        self.thread.join()

    def _line(self, item: object) -> str:
        if isinstance(item, logging.LogRecord):
            return self.formatter.format(item)
        if isinstance(item, dict):  # a request line, whole: formatting it is this thread's only work
            return _json(item)
        raise TypeError(f"not a log line: {type(item).__name__}")

    def _drain(self) -> None:
        pending, sink = self.sink.lines, self.sink
        while pending:
            lines: list[str] = []
            while pending and len(lines) < WRITE_BATCH:
                item = pending.popleft()
                try:
                    lines.append(self._line(item))
                except Exception as exc:  # a bad record must not end logging
                    lines.append(_json({"level": "error", "msg": f"log line dropped: {type(exc).__name__}"}))
            if sink.dropped:
                dropped, sink.dropped = sink.dropped, 0
                lines.append(_json({"level": "warning", "msg": f"{dropped} log lines dropped: output blocked"}))
            with contextlib.suppress(OSError, ValueError):  # stderr closed: nothing left to tell
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()

    def _run(self) -> None:
        wake = self.sink.wake
        while not self.stopping:
            wake.wait(FLUSH_SECONDS)
            wake.clear()
            self._drain()
        self._drain()


def configure(level: str = "INFO", stream: TextIO | None = None) -> LogWriter:
    global _sink
    sink = LogSink()
    writer = LogWriter(sink, stream or sys.stderr)
    root = logging.getLogger()
    handler = logging.handlers.QueueHandler(sink)  # type: ignore[arg-type]
    handler.setFormatter(SafeFormatter())  # formats in the logging thread, before the record is queued
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    writer.start()
    _sink = sink
    return writer


def put_line(fields: dict[str, object]) -> bool:
    """Hand a whole line to the writer; False when ``configure`` has not run (use ``logging`` then)."""
    sink = _sink
    if sink is None:
        return False
    sink.put(fields)
    return True

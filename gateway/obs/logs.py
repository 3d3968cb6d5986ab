"""Structured logs: one line per record, JSON or text, written off the event loop by one writer thread.

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

Two formats (``FORMATS``), one line per record either way: JSON for collectors, and text for a person
at a terminal (time, level, logger, message, then the record's fields as ``key=value``). Both stamp
``ts`` as ISO 8601 UTC with milliseconds, made by the writer thread from the float the record carries,
and ``pid``, the process that wrote it (``--workers N`` share one stderr),
and both keep a record's message capped and its traceback free of a request's content
(``SafeFormatter``); the text format also escapes control characters, so that no message can start a
line of its own, and indents a traceback's lines under its record.

The writer is process-wide because the root logger is: ``configure`` runs once per process.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import logging
import logging.handlers
import os
import re
import sys
import threading
import time
import traceback
from typing import Any, TextIO

import pydantic
import pydantic_core

ACCESS_LOGGER = "gateway.access"
AUDIT_LOGGER = "gateway.audit"
FORMATS = ("json", "text")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
WRITE_BATCH = 256
FLUSH_SECONDS = 0.05
MAX_PENDING = 100_000
_sink: LogSink | None = None  # the writer's, once ``configure`` has run


MAX_MESSAGE = 2000  # characters of a log message; a client's 5 MB model name must not make a 5 MB line
MAX_EXCEPTION_MESSAGE = 200  # characters of an exception's own message within a traceback
MAX_FIELD = 1000  # characters of one structured field's string (an audit's key name, a team id)
MAX_ITEMS = 50  # items of one structured field's list or mapping
MAX_DEPTH = 4  # nesting kept of a structured field; deeper values are written as capped text


def _json(out: dict[str, Any]) -> str:
    return pydantic_core.to_json(out, fallback=str).decode()


class _Clock:
    """``iso_time``'s last second, formatted: lines come in bursts within one second, so most lines
    cost an integer comparison and a string join, not a ``strftime``."""

    second = -1
    prefix = ""


def iso_time(seconds: float) -> str:
    """``2026-11-25T22:30:01.123Z``: UTC, milliseconds truncated (a line never claims a later time)."""
    whole = int(seconds)
    cached = _Clock.second, _Clock.prefix  # read together: another thread may format at the same time
    if cached[0] == whole:
        prefix = cached[1]
    else:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _Clock.second, _Clock.prefix = whole, prefix
    return f"{prefix}.{int((seconds - whole) * 1000):03d}Z"


# Control characters (and Unicode's line breaks) written as escapes: a client's string must not end a
# text line and start a forged one.
_CONTROL = {i: f"\\x{i:02x}" for i in (*range(0x20), 0x7F, 0x85)} | {0x2028: "\\u2028", 0x2029: "\\u2029"}
_CONTROL.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"})
_BARE = re.compile(r"[^\s\"'=\\]+")  # a value written without quotes: no blank, quote, '=' or backslash


def one_line(text: str) -> str:
    return text.translate(_CONTROL)


def _value(value: object) -> str:
    if isinstance(value, str):
        return value if _BARE.fullmatch(value) and value.isprintable() else json.dumps(value)
    if isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, list | tuple) and all(isinstance(v, str) and _BARE.fullmatch(v) for v in value):
        return ",".join(value) if value else "[]"
    return one_line(pydantic_core.to_json(value, fallback=str).decode())  # lists, dicts: compact JSON


_HEAD = frozenset({"ts", "level", "logger", "pid", "msg", "exc"})  # placed by ``text_line`` itself


def text_line(fields: dict[str, Any]) -> str:
    """A record's fields as one text line: time, level, logger[pid] and message, then the other fields as
    ``key=value`` (absent ones left out), then the traceback's lines, indented."""
    ts = fields.get("ts")
    head = [
        iso_time(ts) if isinstance(ts, float | int) else str(ts or iso_time(time.time())),
        str(fields.get("level", "info")).upper().ljust(7),
        str(fields.get("logger", "-")) + (f"[{fields['pid']}]" if "pid" in fields else ""),  # syslog's logger[pid]
    ]
    message = fields.get("msg")
    if message is None:
        message = fields.get("event", "")
    parts = [" ".join(head), one_line(str(message))]
    for key, value in fields.items():
        if key in _HEAD or value is None or (key == "event" and value == message):
            continue
        parts.append(f"{key}={_value(value)}")
    line = " ".join(parts)
    exc = fields.get("exc")
    if exc:  # each line indented: nothing in a traceback can pass for a record of its own
        line += "".join(f"\n    {one_line(x)}" for x in str(exc).splitlines())
    return line


_NUMBER = (float, int)  # a tuple made once: ``float | int`` in the call would build a union per line


def json_line(fields: dict[str, Any]) -> str:
    ts = fields.get("ts")
    if isinstance(ts, _NUMBER):  # a request line's, as its record took it: formatted here, off the loop
        fields["ts"] = iso_time(ts)
    return _json(fields)


def capped(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def bounded(value: Any, depth: int = 0) -> Any:
    """A structured field as a line may hold it: strings capped, lists and mappings cut to
    ``MAX_ITEMS`` (saying how many were left out), nesting to ``MAX_DEPTH``; numbers as they are."""
    if isinstance(value, str):
        return capped(value, MAX_FIELD)
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= MAX_DEPTH:
        return capped(str(value), MAX_FIELD)
    if isinstance(value, dict):
        out = {capped(str(k), MAX_FIELD): bounded(v, depth + 1) for k, v in itertools.islice(value.items(), MAX_ITEMS)}
        if len(value) > MAX_ITEMS:
            out["..."] = f"{len(value) - MAX_ITEMS} more"
        return out
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        kept = [bounded(v, depth + 1) for v in items[:MAX_ITEMS]]
        return [*kept, f"... ({len(items) - MAX_ITEMS} more)"] if len(items) > MAX_ITEMS else kept
    return capped(str(value), MAX_FIELD)


_PLAIN = frozenset({int, float, bool, type(None)})
_FLAT = _PLAIN | {str}  # a line of these types and ``MAX_FIELD`` characters at most is bounded as it is


def bounded_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A line's structured fields, each ``bounded``: no field can make a line unbounded. A number or a
    short string is kept without the call (a request line's fields are nearly all such: 3.4 -> 1.3 us
    a line, docs/performance.md)."""
    out = {}
    for k, v in fields.items():
        kind = type(v)
        out[k] = v if kind in _PLAIN or (kind is str and len(v) <= MAX_FIELD) else bounded(v)
    return out


def bound_in_place(fields: dict[str, Any]) -> dict[str, Any]:
    """``bounded_fields`` for a dict nobody else holds (a request line, handed over whole): the values
    that need it replaced, no copy made (the copy, grown a key at a time, cost more than the checks)."""
    for k, v in fields.items():  # replacing a value is not resizing: the iteration stays valid
        kind = type(v)
        if kind not in _PLAIN and (kind is not str or len(v) > MAX_FIELD):
            fields[k] = bounded(v)
    return fields


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
    """Formats a record's message as the log line holds it: capped, its traceback (``safe_exc`` on the
    record, never quoting a request's content: ``traceback_text``) kept apart for the line's format to
    place. The queue handler uses it, so what reaches the writer thread is already safe."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and record.exc_info[1] is not None:
            record.safe_exc = traceback_text(record.exc_info[1])
        return capped(record.getMessage(), MAX_MESSAGE)


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """A ``logging`` record as a line's fields. ``extra={"fields": {...}}`` adds structured ones (a
    request's, an audit's); the message is left out when it only repeats their ``event``."""
    out: dict[str, Any] = {"ts": record.created, "level": record.levelname.lower(), "logger": record.name}
    message = capped(record.getMessage(), MAX_MESSAGE)
    fields = getattr(record, "fields", None)
    if fields is None or message != fields.get("event"):
        out["msg"] = message
    if fields is not None:
        out.update(bounded_fields(fields))
    exc = getattr(record, "safe_exc", None)
    if exc is None and record.exc_info and record.exc_info[1] is not None:  # not through the queue handler
        exc = traceback_text(record.exc_info[1])
    if exc is not None:
        out["exc"] = exc
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json_line(record_fields(record))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return text_line(record_fields(record))


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

    def __init__(self, sink: LogSink, stream: TextIO, fmt: str = "json") -> None:
        self.sink, self.stream = sink, stream
        self.line = text_line if fmt == "text" else json_line
        self.stopping = False
        # each line says which process wrote it: with --workers N, N processes share one stderr
        self.pid = os.getpid()
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
            fields = record_fields(item)
        elif isinstance(item, dict):  # a request line, whole: formatting it is this thread's only work
            if _FLAT.issuperset(map(type, item.values())):
                item["pid"] = self.pid
                line = self.line(item)
                # either format writes every string whole, so none in a short line needs its bound:
                # ``bound_in_place``'s walk, a third of a request line's cost, is left out
                if len(line) <= MAX_FIELD:
                    return line
            fields = bound_in_place(item)
        else:
            raise TypeError(f"not a log line: {type(item).__name__}")
        fields["pid"] = self.pid
        return self.line(fields)

    def _own(self, level: str, message: str) -> str:
        fields = {"ts": time.time(), "level": level, "logger": "gateway.logs", "msg": message, "pid": self.pid}
        return self.line(fields)

    def _drain(self) -> None:
        pending, sink = self.sink.lines, self.sink
        while pending:
            lines: list[str] = []
            while pending and len(lines) < WRITE_BATCH:
                item = pending.popleft()
                try:
                    lines.append(self._line(item))
                except Exception as exc:  # a bad record must not end logging
                    lines.append(self._own("error", f"log line dropped: {type(exc).__name__}"))
            if sink.dropped:
                dropped, sink.dropped = sink.dropped, 0
                lines.append(self._own("warning", f"{dropped} log lines dropped: output blocked"))
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


def default_format(stream: TextIO) -> str:
    """Text for a person at a terminal, JSON for everything else (a collector, a file, a pipe)."""
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):  # closed, or not a file
        return "json"


def configure(level: str = "INFO", stream: TextIO | None = None, fmt: str | None = None) -> LogWriter:
    """Route every log line through one writer thread to ``stream`` (stderr) in ``fmt`` (``FORMATS``;
    by default ``default_format``) from ``level`` up."""
    global _sink
    stream = stream or sys.stderr
    sink = LogSink()
    writer = LogWriter(sink, stream, fmt or default_format(stream))
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

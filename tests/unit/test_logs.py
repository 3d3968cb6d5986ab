"""The log writer: request lines and ordinary log calls reach the output in order, within the flush
interval and at shutdown, without a thread wake-up per line; a blocked output drops and counts lines
instead of holding them without bound. Both formats, JSON and text, stamp ISO 8601 UTC times with
milliseconds and keep a line bounded, one record to a line, and free of a request's content."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from collections.abc import Iterator
from types import SimpleNamespace

import pydantic
import pytest

from gateway.obs import logs
from gateway.obs.logs import LogSink, LogWriter
from gateway.web import record
from gateway.web.record import BACKLOG_SECONDS, Backlog, RequestLog
from tests.support import eventually_blocking
from tests.support.clock import VirtualClock


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def lines_of(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_request_lines_and_log_calls_come_out_in_order_and_all_at_stop() -> None:
    out = io.StringIO()
    writer = logs.configure("INFO", out)
    try:
        for i in range(3):
            RequestLog(Backlog(), logging.getLogger(logs.ACCESS_LOGGER), f"rid-{i}", "openai").emit()
        logging.getLogger("gateway.test").warning("between %s", "requests")
        RequestLog(Backlog(), logging.getLogger(logs.ACCESS_LOGGER), "rid-3", "friendli").emit()
    finally:
        writer.stop()
    got = lines_of(out.getvalue())
    assert [g.get("request_id") or g.get("msg") for g in got] == [
        "rid-0",
        "rid-1",
        "rid-2",
        "between requests",
        "rid-3",
    ]
    assert got[3]["level"] == "warning" and got[3]["logger"] == "gateway.test"
    assert got[4]["dialect"] == "friendli" and got[4]["event"] == "request"
    assert {g["pid"] for g in got} == {os.getpid()}  # request lines and log calls: which worker wrote them


def test_lines_are_written_within_the_flush_interval_without_a_wake_up() -> None:
    out = io.StringIO()
    writer = logs.configure("INFO", out)
    try:
        RequestLog(Backlog(), logging.getLogger(logs.ACCESS_LOGGER), "rid-live", "openai").emit()
        assert not writer.sink.wake.is_set()  # one line does not wake the writer
        # The bound is what this test checks: written within the flush interval, not only at the end.
        eventually_blocking(lambda: "rid-live" in out.getvalue(), "the line written", within=2)
    finally:
        writer.stop()


def test_a_full_batch_wakes_the_writer() -> None:
    sink = LogSink()
    for i in range(logs.WRITE_BATCH + 1):
        sink.put({"n": i})
    assert sink.wake.is_set()


def test_lines_past_the_bound_are_dropped_and_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "MAX_PENDING", 5)
    sink = LogSink()
    for i in range(8):
        sink.put({"n": i})
    assert len(sink.lines) == 5 and sink.dropped == 3
    out = io.StringIO()
    writer = LogWriter(sink, out)
    writer.start()
    writer.stop()
    got = lines_of(out.getvalue())
    assert [g["n"] for g in got if "n" in g] == [0, 1, 2, 3, 4]
    assert got[-1]["msg"] == "3 log lines dropped: output blocked"


def test_a_line_that_cannot_be_formatted_does_not_end_logging() -> None:
    sink = LogSink()
    sink.put(("not a time", "not fields"))
    sink.put({"n": 1})
    out = io.StringIO()
    writer = LogWriter(sink, out)
    writer.start()
    writer.stop()
    got = lines_of(out.getvalue())
    assert got[0]["msg"].startswith("log line dropped") and got[1]["n"] == 1  # type: ignore[union-attr]


async def test_ended_requests_are_logged_in_one_batch_within_the_backlog_interval(clock: VirtualClock) -> None:
    out = io.StringIO()
    writer = logs.configure("INFO", out)
    backlog = Backlog()
    try:
        for i in range(3):
            RequestLog(backlog, logging.getLogger(logs.ACCESS_LOGGER), f"rid-{i}", "openai").close()
        timer = backlog.timer
        assert timer is not None and len(backlog.items) == 3  # one timer for the batch
        await clock.advance(BACKLOG_SECONDS + 0.001)  # just past the interval
        assert not backlog.items and backlog.timer is None
    finally:
        writer.stop()
    assert [g["request_id"] for g in lines_of(out.getvalue())] == ["rid-0", "rid-1", "rid-2"]


async def test_a_request_is_timed_when_it_ends_not_when_its_batch_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    backlog = Backlog()
    log = RequestLog(backlog, logging.getLogger(logs.ACCESS_LOGGER), "rid-t", "openai")
    log.close()
    ended, wall = log.ended, log.wall
    out = io.StringIO()
    writer = logs.configure("INFO", out)
    try:
        later = SimpleNamespace(perf_counter=lambda: ended + 1.0, time=lambda: wall + 1.0)
        monkeypatch.setattr(record, "time", later)  # the batch is done a second after the request ended
        backlog.drain()
    finally:
        writer.stop()
    (line,) = lines_of(out.getvalue())
    assert line["duration_ms"] == round((ended - log.started) * 1000, 3) < 1000
    assert line["ts"] == logs.iso_time(wall)


async def test_one_record_that_cannot_be_logged_does_not_lose_its_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    emitted: list[str] = []

    def emit(self: RequestLog) -> None:
        if self.rid == "bad":
            raise RuntimeError("broken record")
        emitted.append(self.rid)

    monkeypatch.setattr(RequestLog, "emit", emit)
    backlog = Backlog()
    for rid in ("a", "bad", "b"):
        RequestLog(backlog, logging.getLogger(logs.ACCESS_LOGGER), rid, "openai").close()
    backlog.drain()
    assert emitted == ["a", "b"] and backlog.timer is None


ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
CANARY = "PROMPT-CANARY-7f3a"


def test_times_are_iso_8601_utc_with_milliseconds_never_rounded_up() -> None:
    assert logs.iso_time(0.0) == "1970-01-01T00:00:00.000Z"
    assert logs.iso_time(1795645801.1239) == "2026-11-25T22:30:01.123Z"
    assert logs.iso_time(1795645801.9999) == "2026-11-25T22:30:01.999Z"  # not :02.000
    assert logs.iso_time(1795645802.0) == "2026-11-25T22:30:02.000Z"  # the cached second moves on


def test_json_lines_carry_iso_times_for_requests_and_log_calls() -> None:
    out = io.StringIO()
    writer = logs.configure("INFO", out, "json")
    try:
        RequestLog(Backlog(), logging.getLogger(logs.ACCESS_LOGGER), "rid-j", "openai").emit()
        logging.getLogger("gateway.test").info("hello")
    finally:
        writer.stop()
    request, call = lines_of(out.getvalue())
    assert ISO_MS.fullmatch(str(request["ts"])) and ISO_MS.fullmatch(str(call["ts"]))
    assert request["event"] == "request" and call["msg"] == "hello"


def test_text_lines_read_time_level_logger_message_then_fields() -> None:
    out = io.StringIO()
    writer = logs.configure("INFO", out, "text")
    try:
        RequestLog(Backlog(), logging.getLogger(logs.ACCESS_LOGGER), "rid-t", "openai").emit()
        logging.getLogger("gateway.test").warning("disk %s", "full")
        fields = {"event": "audit", "admin": "ab12cd34", "teams": ["a", "b"], "name": "two words", "gone": None}
        logging.getLogger(logs.AUDIT_LOGGER).info("audit", extra={"fields": fields})
    finally:
        writer.stop()
    request, call, audit = out.getvalue().splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    pid = rf"\[{os.getpid()}\]"  # which worker wrote it
    assert re.fullmatch(rf"{stamp} INFO    gateway\.access{pid} request request_id=rid-t dialect=openai .*", request)
    assert " status=200 " in request and " duration_ms=" in request and "team=" not in request  # None: left out
    assert re.fullmatch(rf"{stamp} WARNING gateway\.test{pid} disk full", call)
    assert audit.endswith(f'gateway.audit[{os.getpid()}] audit admin=ab12cd34 teams=a,b name="two words"'), audit


def test_the_default_format_is_text_at_a_terminal_and_json_elsewhere() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert logs.default_format(Terminal()) == "text"
    assert logs.default_format(io.StringIO()) == "json"
    out = io.StringIO()
    writer = logs.configure("INFO", out)
    try:
        logging.getLogger("gateway.test").info("to a pipe")
    finally:
        writer.stop()
    assert lines_of(out.getvalue())[0]["msg"] == "to a pipe"


def test_the_level_filters_in_either_format() -> None:
    out = io.StringIO()
    writer = logs.configure("WARNING", out, "text")
    try:
        logging.getLogger("gateway.test").info("not shown")
        RequestLog(Backlog(), logging.getLogger(logs.ACCESS_LOGGER), "rid-quiet", "openai").emit()
        logging.getLogger("gateway.test").warning("shown")
    finally:
        writer.stop()
    (line,) = out.getvalue().splitlines()
    assert line.endswith(f"gateway.test[{os.getpid()}] shown")


class Body(pydantic.BaseModel):
    prompt: int


def test_text_lines_stay_one_record_a_line_capped_and_free_of_request_content() -> None:
    """A client's newline cannot forge a record; a traceback's lines are indented under its own record
    and name where validation failed, not the prompt; a huge message is capped as in JSON."""
    out = io.StringIO()
    writer = logs.configure("INFO", out, "text")
    forged = "m\n2026-11-25T22:30:01.123Z ERROR   gateway forged\u2028line"
    try:
        logging.getLogger("gateway.test").warning("model %s unknown", forged)
        try:
            Body.model_validate({"prompt": CANARY * 3})
        except pydantic.ValidationError:
            logging.getLogger("gateway.test").exception("parsing failed")
        logging.getLogger("gateway.test").warning("model %s unknown", "m" * 5_000_000)
        RequestLog(Backlog(), logging.getLogger(logs.ACCESS_LOGGER), "rid\nforged=1", "openai").emit()
    finally:
        writer.stop()
    text = out.getvalue()
    records = [line for line in text.splitlines() if not line.startswith(" ")]
    assert len(records) == 4 and all(ISO_MS.match(line) for line in records)
    assert "m\\n2026-11-25T22:30:01.123Z ERROR   gateway forged\\u2028line unknown" in records[0]
    assert records[1].endswith("parsing failed") and "validation error(s) at prompt" in text
    assert CANARY not in text
    assert len(records[2]) < logs.MAX_MESSAGE + 200 and "more characters" in records[2]
    assert 'request_id="rid\\nforged=1"' in records[3]

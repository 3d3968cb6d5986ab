"""The log writer: request lines and ordinary log calls reach the output in order, within the flush
interval and at shutdown, without a thread wake-up per line; a blocked output drops and counts lines
instead of holding them without bound."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Iterator

import pytest

from gateway.obs import logs
from gateway.obs.logs import LogSink, LogWriter
from gateway.web.record import BACKLOG_SECONDS, Backlog, RequestLog


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


def test_lines_are_written_within_the_flush_interval_without_a_wake_up() -> None:
    out = io.StringIO()
    writer = logs.configure("INFO", out)
    try:
        RequestLog(Backlog(), logging.getLogger(logs.ACCESS_LOGGER), "rid-live", "openai").emit()
        assert not writer.sink.wake.is_set()  # one line does not wake the writer
        deadline = time.monotonic() + 2
        while "rid-live" not in out.getvalue():
            assert time.monotonic() < deadline, "the line was never written"
            time.sleep(0.01)
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


async def test_ended_requests_are_logged_in_one_batch_within_the_backlog_interval() -> None:
    out = io.StringIO()
    writer = logs.configure("INFO", out)
    backlog = Backlog()
    try:
        for i in range(3):
            RequestLog(backlog, logging.getLogger(logs.ACCESS_LOGGER), f"rid-{i}", "openai").close()
        timer = backlog.timer
        assert timer is not None and len(backlog.items) == 3  # one timer for the batch
        await asyncio.sleep(BACKLOG_SECONDS * 3)
        assert not backlog.items and backlog.timer is None
    finally:
        writer.stop()
    assert [g["request_id"] for g in lines_of(out.getvalue())] == ["rid-0", "rid-1", "rid-2"]


async def test_a_request_is_timed_when_it_ends_not_when_its_batch_is_done() -> None:
    backlog = Backlog()
    log = RequestLog(backlog, logging.getLogger(logs.ACCESS_LOGGER), "rid-t", "openai")
    log.close()
    ended, wall = log.ended, log.wall
    out = io.StringIO()
    writer = logs.configure("INFO", out)
    try:
        await asyncio.sleep(0.05)  # the batch is done later than the request ended
        backlog.drain()
    finally:
        writer.stop()
    (line,) = lines_of(out.getvalue())
    assert line["duration_ms"] == round((ended - log.started) * 1000, 3) < 50
    assert line["ts"] == round(wall, 3)


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

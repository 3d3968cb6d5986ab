"""Log lines are bounded and never quote a request's content: a client's 5 MB string makes no 5 MB
line, and a traceback of an error about a prompt names where it failed, not the prompt."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.obs import logs
from gateway.policy.audit import AuditTrail

CANARY = "PROMPT-CANARY-7f3a"


@pytest.fixture
def log() -> Iterator[tuple[io.StringIO, logs.LogWriter]]:
    """The process's log set up as ``serve`` sets it up, writing to a string; the test stops the writer
    (which writes everything queued) before it reads."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    writer = logs.configure("INFO", stream)
    try:
        yield stream, writer
    finally:
        writer.stop()
        root.handlers[:] = handlers
        root.setLevel(level)


class Body(pydantic.BaseModel):
    prompt: int


def test_a_huge_message_is_capped(log: tuple[io.StringIO, logs.LogWriter]) -> None:
    logging.getLogger("gateway.test").warning("model %s unknown", "m" * 5_000_000)
    out, writer = log
    writer.stop()
    (line,) = [json.loads(x) for x in out.getvalue().splitlines()]
    assert len(json.dumps(line)) < logs.MAX_MESSAGE + 200
    assert "more characters" in str(line["msg"])


def test_a_traceback_names_where_validation_failed_not_the_input(log: tuple[io.StringIO, logs.LogWriter]) -> None:
    try:
        Body.model_validate({"prompt": CANARY * 3})
    except pydantic.ValidationError:
        logging.getLogger("gateway.test").exception("parsing failed")
    out, writer = log
    writer.stop()
    text = out.getvalue()
    assert "parsing failed" in text and "validation error(s) at prompt" in text
    assert CANARY not in text


def test_a_chained_exception_message_is_capped_in_every_link(log: tuple[io.StringIO, logs.LogWriter]) -> None:
    try:
        try:
            raise ValueError(CANARY + "x" * 10_000)
        except ValueError as inner:
            raise RuntimeError("y" * 10_000) from inner
    except RuntimeError:
        logging.getLogger("gateway.test").exception("failed")
    out, writer = log
    writer.stop()
    text = out.getvalue()
    assert "ValueError" in text and "RuntimeError" in text
    assert len(text) < 2 * logs.MAX_EXCEPTION_MESSAGE + 4000


HUGE = "k" * 1_000_000


@pytest.mark.parametrize(
    "value",
    [HUGE, [HUGE] * 3, ["t"] * 100_000, {"a": {"b": {"c": {"d": {"e": HUGE}}}}}, {str(i): i for i in range(10_000)}],
    ids=["string", "strings", "list", "deep", "mapping"],
)
async def test_every_structured_field_is_bounded_audit_and_request_lines_alike(
    log: tuple[io.StringIO, logs.LogWriter], value: object
) -> None:
    """A 1 MB key name made a 1 MB audit line: any field, through ``logging`` or a whole request line,
    comes out within a bound whatever its size or shape."""
    await AuditTrail().record("admin", "key.create", key_id="k", name=value)
    logs.put_line({"ts": 0.0, "level": "info", "logger": logs.ACCESS_LOGGER, "event": "request", "model": value})
    out, writer = log
    writer.stop()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    bound = 3 * logs.MAX_ITEMS * (logs.MAX_FIELD + 100)
    assert all(len(line) < bound for line in lines), [len(line) for line in lines]
    assert "more" in out.getvalue()


async def test_an_audit_entry_as_listed_is_bounded_too() -> None:
    trail = AuditTrail()
    await trail.record("admin", "key.create", name=HUGE)
    (entry,) = await trail.recent(1)
    assert len(entry["name"]) < logs.MAX_FIELD + 100


class Text(str):
    pass


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.integers(logs.MAX_FIELD - 2, logs.MAX_FIELD + 2).map(lambda n: "x" * n),
    st.text(max_size=5).map(Text),
    st.lists(st.text(max_size=3), max_size=logs.MAX_ITEMS + 2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
)


@given(st.dictionaries(st.text(max_size=5), values, max_size=6))
def test_a_lines_fields_are_each_bounded_short_ones_as_they_are(fields: dict[str, object]) -> None:
    bounded = logs.bounded_fields(fields)
    assert bounded == {k: logs.bounded(v) for k, v in fields.items()}
    assert [type(v) for v in bounded.values()] == [type(logs.bounded(v)) for v in fields.values()]


@given(st.dictionaries(st.text(max_size=5), values, max_size=6))
def test_a_request_line_bounded_in_place_reads_as_one_bounded_apart(fields: dict[str, object]) -> None:
    expected = logs.bounded_fields(fields)
    line = dict(fields)
    assert logs.bound_in_place(line) is line
    assert logs.json_line(line) == logs.json_line(expected)
    assert [type(v) for v in line.values()] == [type(v) for v in expected.values()]


@given(st.dictionaries(st.text(max_size=5), values, max_size=6), st.sampled_from(logs.FORMATS))
def test_a_request_line_written_unbounded_when_short_reads_as_one_bounded(fields: dict[str, object], fmt: str) -> None:
    """The writer leaves a short line of plain values unbounded: it must read as the bounded one."""
    writer = logs.LogWriter(logs.LogSink(), io.StringIO(), fmt)
    fields = {**fields, "ts": 1.5}  # a line without a time of its own is stamped now: not twice alike
    expected = {**logs.bounded_fields(fields), "pid": writer.pid}
    assert writer._line(dict(fields)) == writer.line(expected)

"""Log lines are bounded and never quote a request's content: a client's 5 MB string makes no 5 MB
line, and a traceback of an error about a prompt names where it failed, not the prompt."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pydantic
import pytest

from gateway.obs import logs

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

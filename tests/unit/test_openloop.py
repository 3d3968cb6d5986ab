"""The open-loop benchmark client frames HTTP/1.1 answers itself: whole ones only, by Content-Length or
chunked encoding, never a byte of the next answer."""

from __future__ import annotations

import pytest

from benchmarks.openloop import _frame

SIZED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = b"HTTP/1.1 429 Too Many Requests\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\n\r\n\r\n0\r\n\r\n"


def test_whole_answers_are_framed_with_their_status() -> None:
    assert _frame(SIZED) == (200, len(SIZED))
    assert _frame(SIZED + SIZED[:10]) == (200, len(SIZED))  # the next answer's start stays
    assert _frame(CHUNKED) == (429, len(CHUNKED))  # a chunk holding CRLFs, and a chunk extension


@pytest.mark.parametrize("cut", [10, len(SIZED) - 1])
def test_a_partial_sized_answer_waits(cut: int) -> None:
    assert _frame(SIZED[:cut]) is None


@pytest.mark.parametrize("cut", [60, len(CHUNKED) - 3, len(CHUNKED) - 1])
def test_a_partial_chunked_answer_waits(cut: int) -> None:
    assert _frame(CHUNKED[:cut]) is None


def test_an_unframed_answer_is_an_error() -> None:
    with pytest.raises(ValueError, match="neither"):
        _frame(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbody")

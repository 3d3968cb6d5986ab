"""A stream's time bounds (first byte, idle between reads, the request's deadline) kept in one entry of
the loop's timer wheel, for the HTTP adapter's streamed answers."""

from __future__ import annotations

from types import TracebackType

import aiohttp

from gateway.runtime.timers import Wheel, current_task, timed_out


class StreamIdle(Exception):
    """Set on a stream's reader by ``StreamWatch``: no bytes for too long, or the deadline or the body's
    bound passed; ``args[0]`` says which."""


class StreamWatch:
    """A stream's time bounds in one entry of the loop's ``Wheel``, filed once and re-filed only when
    it comes due (a stream is hundreds of reads; a timer per read, or a bound per hop, costs more than
    a short stream's relay). Until the response head is in (``with watch:``), the first-byte bound: the
    task is cancelled and the block raises ``TimeoutError``, as ``Bound`` does. Then, from
    ``reading``, the body's: a read waiting longer than ``idle``, any moment past the request's
    deadline, or a whole ``total`` (the target's) in which the stream made no progress (reads that
    keep coming, a keep-alive comment or a ping at a time, do not keep a stuck stream open for ever;
    a long answer that goes on is not cut), fails the reader with ``StreamIdle``. Progress is
    ``moved``, set by the reader for a read that carried events and checked only when the bound
    comes due. Time the consumer spends between reads (a slow client) does not count as idle."""

    __slots__ = (
        "_body",
        "_cancelling",
        "_due",
        "_expired",
        "_hard",
        "_head_due",
        "_idle",
        "_reader",
        "_span",
        "_task",
        "_wheel",
        "loop",
        "moved",
        "since",
    )

    def __init__(self, first_byte: float, idle: float, remaining: float | None, wheel: Wheel) -> None:
        self.loop = loop = wheel.loop
        self._task, self._cancelling = current_task(loop, "StreamWatch")
        self._wheel = wheel
        now = loop.time()
        self._idle = idle
        self._head_due = now + first_byte
        self._hard = None if remaining is None else now + max(remaining, 0.0)
        self._reader: aiohttp.StreamReader | None = None
        self._body: float | None = None  # when the stream must have made progress by
        self._span = 0.0
        self.moved = False  # a read since the body's bound was set carried events
        self._expired = False
        self.since: float | None = None  # when the pending read began; None between reads
        # No later than the first idle bound or the deadline can fall: moving sooner means re-filing
        due = min(self._head_due, now + idle)
        self._due = self._wheel.add(self, due if self._hard is None else min(due, self._hard), idle)

    def __enter__(self) -> StreamWatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            return
        self.cancel()  # no stream to watch
        if timed_out(self._task, self._cancelling, self._expired, exc_type):
            raise TimeoutError from exc

    def reading(self, reader: aiohttp.StreamReader, body: float | None = None) -> None:
        """The head is in: from now on, the body's bounds; ``body``: the longest the stream may go
        without progress (``moved``)."""
        self._reader = reader
        if body is None:
            return
        self._span = body
        self._body = due = self.loop.time() + body
        if due < self._due:  # filed for later than the body's bound: sooner now
            self._wheel.discard(self, self._due)
            self._due = self._wheel.add(self, due, self._idle)

    def _file(self, start: float) -> None:
        due = start + self._idle
        for bound in (self._hard, self._body):
            if bound is not None and bound < due:
                due = bound
        self._due = self._wheel.add(self, due, self._idle)

    def expire(self) -> None:
        now = self.loop.time()
        if self._reader is None:  # waiting for the head
            if now >= self._head_due:
                self._expired = True
                self._task.cancel()
            else:
                self._due = self._wheel.add(self, self._head_due, self._idle)
            return
        since = self.since
        if self._hard is not None and now >= self._hard:
            self._reader.set_exception(StreamIdle("answer not complete in time"))
            return
        if self._body is not None and now >= self._body:
            if not self.moved:
                self._reader.set_exception(StreamIdle("answer not complete in time: no progress, keep-alives only"))
                return
            self.moved, self._body = False, now + self._span
        if since is not None and now >= since + self._idle:
            self._reader.set_exception(StreamIdle("stream idle for too long"))
            return
        self._file(now if since is None else since)

    def cancel(self) -> None:
        self._wheel.discard(self, self._due)

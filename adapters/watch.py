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
    ``reading``, the body's: a read waiting longer than ``idle``, or any moment past the request's
    deadline or the body's own bound (the target's ``total``: reads that keep coming, a keep-alive
    comment or a ping at a time, do not keep a stream that never ends open for ever), fails the reader
    with ``StreamIdle``. Time the consumer spends between reads (a slow client) does not count as
    idle."""

    __slots__ = (
        "_cancelling",
        "_due",
        "_expired",
        "_hard",
        "_head_due",
        "_idle",
        "_reader",
        "_task",
        "_wheel",
        "loop",
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
        """The head is in: from now on, the body's bounds; ``body``: the most the body may take."""
        self._reader = reader
        if body is None:
            return
        due = self.loop.time() + body
        if self._hard is None or due < self._hard:
            self._hard = due
            if due < self._due:  # filed for later than the body may last: sooner now
                self._wheel.discard(self, self._due)
                self._due = self._wheel.add(self, due, self._idle)

    def _file(self, start: float) -> None:
        due = start + self._idle
        self._due = self._wheel.add(self, due if self._hard is None else min(due, self._hard), self._idle)

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
        if since is not None and now >= since + self._idle:
            self._reader.set_exception(StreamIdle("stream idle for too long"))
            return
        self._file(now if since is None else since)

    def cancel(self) -> None:
        self._wheel.discard(self, self._due)

"""Script calls to one Redis server over one connection, by group commit: calls queued while a round
trip is out go together in the next one, admissions and settlements alike.

Per round trip, the client's own cost (a pipeline object, a pool checkout, packing each argument
through the encoder) is as large as the kernel's; here the commands are packed once as RESP bytes and
the replies read in order on a connection this channel keeps (``gateway.runtime.internals``: the one
place below redis-py's command API, with its measured reason). Under load the batches grow by
themselves (one round trip out at a time); a lone call goes at once. A call that may wait (settling
finished requests) is held for ``DEFER_SECONDS`` or until a round trip of two or more calls that
may not wait takes it along, whichever comes first. Not with a lone admission: Redis runs every
command of a read before it writes any reply, so a settlement's script would add its run time to
that admission's answer; at low load the held settlements go on their own, a round trip per
``DEFER_SECONDS`` for all the requests finished meanwhile. redis-py still connects, authenticates,
selects the database and parses (hiredis); the configured Redis timeout bounds each round trip as a
whole (``gateway.runtime.timers``), not each reply read. A failed round trip tells its calls
whether they may have run: ``Unsent`` (no connection: none did), else a timeout or ``Unanswered``
(those not answered may have: a settlement is then sent again under its id, ``scripts.SETTLE``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.obs.metrics import REDIS_ROUND_TRIPS
from gateway.runtime.internals import RawConnection, bulk
from gateway.runtime.timers import Bound, Wheel, on_loop

# How long a call that may wait is held for a round trip to share. A held settlement still holds its
# concurrency lease in Redis: other replicas poll for freed slots less often than this.
DEFER_SECONDS = 0.01
_Call = tuple[bytes, "asyncio.Future[Any]", bool]  # a packed command, its reply's future, whether it may wait


class Unsent(RedisConnectionError):
    """The round trip failed before its calls were written (no connection): none of them ran."""


class Unanswered(RedisConnectionError):
    """The connection failed with the calls written and their replies not all read: those not
    answered may have run (as after a timeout, ``RedisTimeoutError``)."""


class ScriptChannel:
    def __init__(self, client: Any) -> None:
        self._conn = RawConnection(client)
        self._timeout = self._conn.timeout  # redis-py's per-read bound, here per round trip
        self._running: set[asyncio.Task[None]] = set()  # senders in flight (the loop keeps only weak references)
        self._wheel: Wheel | None = None  # round trips' time bounds, on the loop that sends them
        self._queue: list[_Call] = []
        self._urgent = 0  # queued calls that may not wait
        self._sending = False  # a sender is scheduled or running: it takes what ``_take`` gives it
        self._held: asyncio.TimerHandle | None = None  # armed while a call that may wait is queued
        self._due = False  # the held calls have waited long enough
        self.round_trips = 0

    def evalsha(self, packed: bytes, args: bytes, defer: bool = False) -> asyncio.Future[Any]:
        """A script call, its ``head`` (for one argument) ``packed``: the script's reply, or the
        ``ResponseError`` Redis answered (NOSCRIPT among them) as the result; a connection failure or
        timeout as the exception. ``defer``: the call may wait up to ``DEFER_SECONDS`` for a round
        trip to share."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((packed + bulk(args), future, defer))
        if defer:
            if self._held is None:
                self._held = loop.call_later(DEFER_SECONDS, self._release_held)
        else:
            self._urgent += 1
            if not self._sending:
                self._sending = True
                # after this loop turn's other callbacks have queued their calls too
                loop.call_soon(self._start)
        return future

    def _release_held(self) -> None:
        self._held = None
        self._due = True
        if not self._sending:
            self._sending = True
            self._start()

    def _start(self) -> None:
        task = asyncio.ensure_future(self._send())
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _send(self) -> None:
        try:
            while self._urgent or (self._due and self._queue):
                await self._round_trip(self._take())
        finally:
            self._sending = False

    def _take(self) -> list[_Call]:
        """The next round trip's calls: everything queued, but a lone call that may not wait goes
        without the held ones (unless they are due)."""
        batch, self._queue = self._queue, []
        if self._urgent == 1 and not self._due and len(batch) > 1:
            self._queue = [call for call in batch if call[2]]
            batch = [call for call in batch if not call[2]]
        else:  # nothing held is left
            self._due = False
            if self._held is not None:
                self._held.cancel()
                self._held = None
        self._urgent = 0
        return batch

    async def _round_trip(self, batch: list[_Call]) -> None:
        began = time.perf_counter()
        conn, written = self._conn, False
        try:
            self._wheel = wheel = on_loop(self._wheel)
            with Bound(self._timeout, wheel) if self._timeout else contextlib.nullcontext():
                if not conn.connected:
                    await conn.connect()
                written = True  # from here on, a failure may leave calls run and unanswered
                await conn.send(b"".join([call[0] for call in batch]))
                for _, future, _ in batch:
                    reply = await conn.read()
                    if not future.done():  # a caller cancelled meanwhile (a lease then expires with its TTL)
                        future.set_result(reply)
        except Exception as exc:  # redis-py has disconnected (a bound cut the read short, too); the
            # next round trip connects again
            exc = _told(exc, written, self._timeout)
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(exc)
        except BaseException:  # cancelled (shutting down): so are the callers
            for _, future, _ in batch:
                future.cancel()
            raise
        self.round_trips += 1
        REDIS_ROUND_TRIPS.observe(time.perf_counter() - began)


def _told(exc: Exception, written: bool, timeout: float | None) -> Exception:
    """A round trip's failure as its calls' callers are told it: whether the calls may have run
    (``Unsent``, ``Unanswered``, a timeout), the bound's timeout as redis-py tells its own."""
    if not written:
        return exc if isinstance(exc, Unsent) else Unsent(f"not sent: {type(exc).__name__}: {exc}")
    if isinstance(exc, TimeoutError):  # the bound's
        return RedisTimeoutError(f"Redis round trip over {timeout} s")
    return exc if isinstance(exc, RedisTimeoutError | Unanswered) else Unanswered(f"{type(exc).__name__}: {exc}")

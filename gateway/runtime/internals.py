"""The one place the gateway relies on libraries' internals or below-the-API paths. Each use is
here with its measured reason and the change upstream that would retire it; nothing else may reach
into a library. Each is checked by ``tests/unit/test_internals.py`` against the library versions in
``CHECKED``, which are ``pyproject.toml``'s ranges: that test fails on any other version until the use
is checked again (its tests and ``python -m benchmarks.internals`` or the A/B named below). Anything
added here needs the same: an A/B measurement, a check in that test, a retiring change, a range.

**aiohttp.** ``drain_whole`` has an upstream stream's body reader take every buffered chunk in one
join, and ``EventStream`` sends an SSE answer's head with its first event.
``StreamReader._read_nowait(-1)`` (what ``readany()`` returns) takes the buffered chunks one by one
through ``_read_nowait_chunk``, and for each pays a popleft, the counters, a trim of the chunk-split
queue, a low-water check and, below the low-water mark, a ``resume_reading()`` on the connection,
which feeds the parser ``b""`` and resumes a transport that is reading anyway. An SSE upstream writes
one HTTP chunk per event, so a read under load holds dozens. ``WholeReads`` joins them once and does
that bookkeeping once (without it 1.87M -> 2.42M instructions per 64-event stream, +10 to +17% CPU
per stream; docs/performance.md). aiohttp compiles its parser's reader class in, so the class is
changed on the reader the parser made (``drain_whole``). An aiohttp whose reader lacks a name relied
on here keeps its own reader, which returns the same bytes. Retired by: aiohttp's
``StreamReader._read_nowait(-1)`` draining its buffer in one join with the bookkeeping done once, or
its protocol's ``resume_reading()`` returning at once when reading is not paused.

``EventStream`` sets ``StreamResponse._send_headers_immediately`` to False, as aiohttp (3.12 on,
aio-libs/aiohttp#10991) does for whole answers: the head waits for the first write and leaves in the
same send, one send per stream fewer. The answer is prepared only once the first event is in hand,
so the head is never held back waiting on the upstream. Retired by: a public way to ask for it
(a ``StreamResponse`` argument, or ``prepare()`` taking the first bytes).

``ParseErrors`` answers a request aiohttp's HTTP parser refuses (a header line past 8190 bytes, a
control character in a header, a bad method, request line or chunk size) through the gateway's own
``answer``, in the dialect of the request's path, where aiohttp's ``handle_error`` answers plain text
that quotes the client's bytes back. aiohttp hands its error handler a placeholder request (path
``/``) and keeps the parsed URL in its compiled parser, so ``data_received`` keeps the first bytes of
the head being parsed (``SEEN``, copied only until a head is parsed) to find the path when the
parser fails; ``handle_error``, ``_request_count``, ``_messages`` and ``_ErrInfo`` are aiohttp's.
Retired by: a public hook for parser errors in aiohttp (an error handler given the raw request line).

**redis-py.** ``RawConnection`` is one connection borrowed for good from a client's pool, on which
``gateway.limits.channel`` sends script calls packed here as RESP (``evalsha_head``) and reads the
replies in order: below the client's command API. Per call, the client's own cost (a pipeline
object, a pool checkout, each argument through the encoder, a loop timer per reply read) is as
large as the kernel's; packed once, the channel's group commit costs a fraction of a pipeline's
(``python -m benchmarks.internals``; docs/performance.md). redis-py still connects, authenticates,
selects the database and parses the replies (hiredis). Retired by: a redis-py pipeline whose
per-command cost is within noise of this path, or a public way to send pre-packed commands.

``share_cluster_nodes`` and ``close_cluster_nodes`` keep a Redis Cluster client of redis-py 7.4 from
leaving sockets open (not speed: sockets nothing closes until the collector finds them, with a
warning). A topology refresh (a timed-out node, MOVED, a failover) builds a new ``ClusterNode`` per
address for the ``nodes_manager``'s ``slots_cache`` while its ``nodes_cache`` keeps the old ones of
the same addresses: keys are routed through the new objects, and the next refresh drops them with
their connections open, a generation of sockets per refresh. ``share_cluster_nodes`` wraps the
manager's ``initialize`` so that the slot table's lists hold the node cache's objects, one pool per
address, as upstream does since. ``close_cluster_nodes`` closes what ``aclose()`` skips: a client
whose start-up failed counts as never initialized and closes nothing, so the node cache and start-up
nodes are closed here, and the slot table's nodes (one a MOVED answer added). Retired by:
redis/redis-py#4057 (in 8.0; ``CHECKED`` allows 7.4 only).

**prometheus-client.** ``BucketTally`` counts a histogram child's observations on the event loop and
puts them on the child's values (``_upper_bounds``, ``_buckets``, ``_sum``: their ``get``, ``set`` and
``inc``) when the tallies are flushed, before each scrape: the counts and the sum ``observe`` would
have made, the sum to the bit (carried on from the child's own, in the same order of additions).
``observe`` takes two locks and walks the buckets per observation, and a chat request with Redis
limits observes four (its duration, its overhead, its admission's wait, its share of a round trip):
1.246M -> 1.226M instructions per such request (callgrind, benchmarks/results/instructions.md).
Retired by: a public way to add counts to a histogram's buckets.

CPython's private modules: none. Keys were hashed by CPython's own ``_sha2``/``_sha256``; measured
against ``hashlib.sha256`` it saved 1.6k of 900k instructions per request (docs/performance.md), so
``gateway.policy.auth`` uses hashlib.
"""

from __future__ import annotations

import asyncio
import re
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo
from aiohttp.web_request import BaseRequest
from redis.asyncio.cluster import NodesManager
from redis.exceptions import ResponseError

# The library ranges each use here was checked against: pyproject.toml pins the same ranges
CHECKED = {"aiohttp": ">=3.14.5,<3.15", "prometheus-client": ">=0.26,<0.27", "redis": ">=7.4,<8"}

# What WholeReads reads and writes of aiohttp's reader (private names)
USES = frozenset(
    {
        "_buffer",
        "_buffer_offset",
        "_timer",
        "_size",
        "_cursor",
        "_http_chunk_splits",
        "_low_water",
        "_low_water_chunks",
        "_protocol",
    }
)
SUPPORTED = USES.issubset(getattr(StreamReader, "__slots__", ()))


class WholeReads(StreamReader):
    """``readany()`` that takes every buffered chunk in one join, with ``_read_nowait_chunk``'s
    bookkeeping done once for all of them; any other read is aiohttp's own."""

    __slots__ = ()

    def _read_nowait(self, n: int) -> bytes:
        buffer = self._buffer
        if n != -1 or len(buffer) < 2 or self._buffer_offset:
            return super()._read_nowait(n)
        self._timer.assert_timeout()
        # Only what is buffered now, as aiohttp's own (aio-libs/aiohttp#12828): a resume below may
        # refill the buffer re-entrantly, and that waits for the next read.
        data = b"".join(buffer)
        buffer.clear()
        self._size -= len(data)
        self._cursor = cursor = self._cursor + len(data)
        splits = self._http_chunk_splits
        while splits and splits[0] < cursor:
            splits.popleft()
        if self._size < self._low_water and (splits is None or len(splits) < self._low_water_chunks):
            self._protocol.resume_reading()
        return data


def drain_whole(content: StreamReader) -> None:
    """Has ``content`` (an upstream response's body) read as ``WholeReads`` does. A body that is not a
    plain reader (an empty one), or an aiohttp without what ``WholeReads`` uses, reads as before."""
    if SUPPORTED and type(content) is StreamReader:
        content.__class__ = WholeReads


class EventStream(web.StreamResponse):
    """An SSE answer whose head leaves with its first write (module docstring)."""

    _send_headers_immediately = False


# What ParseErrors reads of aiohttp's request handler and server (private names)
HANDLER_USES = frozenset({"_request_count", "_messages"})
SEEN = 16384  # the head's first bytes kept: a request line is at most 8190 (aiohttp's max_line_size)
TAIL = 4096  # of a read that ended a head: the next head may begin in it
# A request line's start: the method (even a bad one), the path up to its query, and the target
REQUEST_LINE = re.compile(rb"(?:^|\n)[^ :\r\n]{1,32} ((/[^ ?#\r\n]{0,2048})[^ \r\n]{0,100})")
# a quoted part (the client's bytes, or a name): a quote opening a word, not an apostrophe within one
QUOTED = re.compile(r"""(?<![A-Za-z])(?:b?'[^']*'?|b?"[^"]*"?)""")
HEADER_NAME = re.compile(r"""b["']([!#$%&*+.^_`|~0-9A-Za-z-]{1,64}):""")
Answer = Callable[[str | None, int, str], web.StreamResponse]


def request_line(head: bytes) -> tuple[str | None, bytes]:
    """The path of the last request line in ``head`` (None: none found) and its target's start."""
    found = None
    for found in REQUEST_LINE.finditer(head):  # noqa: B007 (the last one is wanted)
        continue
    if found is None:
        return None, b""
    return found.group(2).decode("latin-1"), found.group(1)


def describe(exc: HttpProcessingError, target: bytes) -> tuple[int, str]:
    """The status and a message naming what is wrong, without the client's bytes: aiohttp's messages
    quote them, so only the reason before the quote is kept, and a header's name if it is a token."""
    if isinstance(exc, LineTooLong):
        line, limit = bytes(exc.args[0]).removesuffix(b"..."), exc.args[1]
        if line and target.startswith(line[:100]):  # aiohttp quotes the target's first 100 bytes
            return 400, f"the request line is longer than {limit} bytes"
        return 431, f"a header line is longer than {limit} bytes"
    text = exc.message if isinstance(exc.message, str) else ""
    text = text.removeprefix("Bad status line:").strip()
    # llhttp's reason ends where a colon and a line break lead to the client's bytes; a colon within
    # it is its own ("Data after `Connection: close`")
    reason = re.split(r":?\n", text, maxsplit=1)[0]
    reason = " ".join(QUOTED.sub(" ", reason).split()).rstrip(".:")  # a quoted part is the client's
    if not reason or not reason.isprintable() or "b'" in reason or 'b"' in reason or "\\" in reason or len(reason) > 80:
        reason = "malformed request"
    if reason.startswith("Too many headers"):
        return 431, "the request has too many headers"
    name = HEADER_NAME.search(text)
    if "header value" in reason.lower() and name is not None:
        return 400, f"header {name.group(1)} has an invalid character ({reason.lower()})"
    return 400, f"the HTTP request is malformed: {reason.lower()}"


class ParseErrors(RequestHandler):
    """aiohttp's request handler whose parser errors are answered by ``answer(path, status, message)``
    (module docstring); every other error is aiohttp's own."""

    __slots__ = ("_answer", "_failed_path", "_seen", "_target")

    def __init__(self, manager: web.Server, answer: Answer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._answer = answer
        self._seen = b""
        self._failed_path: str | None = None
        self._target = b""

    def data_received(self, data: bytes) -> None:
        count = self._request_count
        super().data_received(data)
        if self._request_count == count:  # a head (or a body) goes on: keep its first bytes
            if len(self._seen) < SEEN:
                self._seen = (self._seen + data)[:SEEN]
            return
        if self._messages and isinstance(self._messages[-1][0], _ErrInfo):
            self._failed_path, self._target = request_line(self._seen + data)
        self._seen = data[-TAIL:]

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError) or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        code, text = describe(exc, self._target)
        self.logger.debug("refused a malformed request from %s: %s", request.remote, text)
        resp = self._answer(self._failed_path, code, text)
        resp.force_close()  # as aiohttp's: the parser cannot go on after a refused head
        return resp


def parse_errors(server: web.Server, answer: Answer) -> Callable[[], RequestHandler]:
    """A protocol factory in place of ``server`` (an ``AppRunner.server``): its connections answer
    parser errors through ``answer``; anything else as ``server()`` would."""
    return lambda: ParseErrors(server, answer, loop=server._loop, **server._kwargs)


def evalsha_head(sha: bytes, keys: list[bytes], args: int) -> bytes:
    """A script call in RESP (an array of bulk strings) up to its ``args`` arguments: the same for
    every call of the script on these keys, so a caller may pack it once."""
    parts = (b"EVALSHA", sha, b"%d" % len(keys), *keys)
    return b"*%d\r\n" % (len(parts) + args) + b"".join([b"$%d\r\n%s\r\n" % (len(p), p) for p in parts])


def bulk(arg: bytes) -> bytes:
    """One argument of a packed command, in RESP."""
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


class _SharedNodes(NodesManager):
    """A cluster client's nodes manager whose topology refresh leaves one node object per address."""

    __slots__ = ()

    async def initialize(self) -> None:
        await super().initialize()
        cached = self.nodes_cache
        for owners in {id(owners): owners for owners in self.slots_cache.values()}.values():
            owners[:] = [cached.get(node.name, node) for node in owners]


def share_cluster_nodes(client: Any) -> None:
    """Has each topology refresh of a Redis Cluster client route through its node cache's objects
    (the manager is a slotted class: its class is swapped, its state kept)."""
    client.nodes_manager.__class__ = _SharedNodes


async def close_cluster_nodes(client: Any) -> None:
    """The nodes of a Redis Cluster client that its ``aclose()`` (already awaited) left connected."""
    nodes = client.nodes_manager
    await nodes.aclose()
    await nodes.aclose("startup_nodes")
    routed = {id(node): node for owners in nodes.slots_cache.values() for node in owners}
    await asyncio.gather(*(node.disconnect() for node in routed.values()))


class RawConnection:
    """One connection of a redis-py client's pool, held for good (the pool's ``disconnect()`` at
    shutdown closes it with the rest): packed commands go out in one send, replies come back one
    read each. A failed send or read leaves redis-py's connection disconnected; the next send
    connects again."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        # redis-py's per-read bound (the configured Redis timeout): the caller's per round trip
        self.timeout: float | None = self._pool.connection_kwargs.get("socket_timeout")
        self._conn: Any = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.is_connected

    async def connect(self) -> None:
        """Connects (again): a failure here has written nothing, so no command sent next has run."""
        if self._conn is None:
            conn = await self._pool.get_connection()
            # The caller bounds a round trip as a whole: redis-py would arm a loop timer for each
            # reply read and make a task for each send (wait_for).
            conn.socket_timeout = None
            self._conn = conn
        else:
            await self._conn.connect()

    async def send(self, packed: bytes) -> None:
        if not self.connected:
            await self.connect()
        await self._conn.send_packed_command(packed, check_health=False)

    async def read(self) -> Any:
        """The next reply, or the ``ResponseError`` Redis answered (NOSCRIPT among them) as a value:
        read whole, so the connection stays in step."""
        try:
            return await self._conn.read_response()
        except ResponseError as exc:
            return exc


class BucketTally:
    """Observations of one prometheus-client histogram child, counted here and put on the child's
    values by ``flush`` (module docstring): the bucket counts ``observe`` would have added, and the
    sum it would have reached, to the bit (the child's sum carried on in the same order of
    additions). The child's one writer, so a child has one tally (``gateway.obs.metrics``)."""

    __slots__ = ("_bounds", "_child", "_counts", "_sum", "pending")

    def __init__(self, child: Any) -> None:
        self._child = child
        self._bounds: tuple[float, ...] = tuple(child._upper_bounds)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self.pending = False

    def observe(self, amount: float) -> None:
        if not self.pending:
            self.pending = True
            self._sum = self._child._sum.get()
        self._sum += amount
        if amount == amount:  # as prometheus-client's: NaN goes to the sum and to no bucket
            self._counts[bisect_left(self._bounds, amount)] += 1

    def flush(self) -> None:
        if not self.pending:
            return
        self.pending = False
        child, counts = self._child, self._counts
        child._sum.set(self._sum)
        for i, count in enumerate(counts):
            if count:
                child._buckets[i].inc(count)
                counts[i] = 0

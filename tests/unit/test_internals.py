"""``gateway.runtime.internals``: fails when a library changes under it. The installed aiohttp and
redis-py are in the ranges each use was checked against, and ``pyproject.toml`` allows those ranges and
no more; the private names and signatures ``WholeReads`` relies on exist and behave as assumed, and its
reads give the same bytes, in the same reads, with the same bookkeeping and flow control as aiohttp's
own reader; ``RawConnection`` sends and reads as redis-py's own commands do, on a real Redis."""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import random
import re
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.http_exceptions
import pytest
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import TestServer
from redis.exceptions import NoScriptError

from gateway.runtime import internals as tuning

ROOT = Path(__file__).resolve().parents[2]

LIMIT = 2**16  # aiohttp's client reads with this limit (read_bufsize)


def release(version: str) -> tuple[int, ...]:
    """``3.14.5`` → (3, 14, 5); a pre-release or local part ends the number."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0].split("rc")[0].split("a")[0])[:3])


def within(version: str, spec: str) -> bool:
    """``spec``: ``>=low,<high``, the form of every range in ``CHECKED``."""
    low, high = re.fullmatch(r">=([\d.]+),<([\d.]+)", spec).groups()  # type: ignore[union-attr]
    return release(low) <= release(version) < release(high)


@pytest.mark.parametrize("library", sorted(tuning.CHECKED))
def test_the_installed_library_is_in_the_checked_range(library: str) -> None:
    installed = importlib.metadata.version(library)
    assert within(installed, tuning.CHECKED[library]), (
        f"{library} {installed} is outside {tuning.CHECKED[library]}, the range gateway/runtime/internals.py was "
        "checked against: re-run this file and the measurements its docstring names, then widen CHECKED and "
        "pyproject.toml together (or drop the use if its retiring change has landed)"
    )


@pytest.mark.parametrize("library", sorted(tuning.CHECKED))
def test_pyproject_allows_exactly_the_checked_range(library: str) -> None:
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(re.sub(r"^[\w-]+(\[[\w,]+\])?", "", line) for line in wanted if re.match(rf"{library}\b", line))
    assert spec.replace(" ", "") == tuning.CHECKED[library]


@pytest.mark.parametrize(
    ("version", "spec", "inside"),
    [
        ("3.14.5", ">=3.14.5,<3.15", True),
        ("3.14.9", ">=3.14.5,<3.15", True),
        ("3.15.0", ">=3.14.5,<3.15", False),
        ("3.14.4", ">=3.14.5,<3.15", False),
        ("8.0.0", ">=7.4,<8", False),
        ("7.4.1", ">=7.4,<8", True),
    ],
)
def test_the_range_check_refuses_what_is_outside(version: str, spec: str, inside: bool) -> None:
    assert within(version, spec) is inside


def test_the_reader_has_every_private_name_relied_on() -> None:
    assert tuning.SUPPORTED, tuning.USES - set(StreamReader.__slots__)
    assert list(inspect.signature(StreamReader._read_nowait).parameters) == ["self", "n"]
    assert list(inspect.signature(StreamReader._read_nowait_chunk).parameters) == ["self", "n"]
    # readany() is what the stream loop calls; it must come through _read_nowait(-1)
    assert "self._read_nowait(-1)" in inspect.getsource(StreamReader.readany)


class Protocol:
    """What a reader asks of its connection: pauses and resumes, counted."""

    def __init__(self) -> None:
        self._reading_paused = False
        self.paused = self.resumed = 0

    def pause_reading(self) -> None:
        self._reading_paused = True
        self.paused += 1

    def resume_reading(self, resume_parser: bool = True) -> None:
        if self._reading_paused:
            self._reading_paused = False
            self.resumed += 1


def reader(whole: bool) -> tuple[StreamReader, Protocol]:
    protocol = Protocol()
    made = StreamReader(protocol, LIMIT, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    if whole:
        tuning.drain_whole(made)
    return made, protocol


def feed(made: StreamReader, chunks: list[bytes]) -> None:
    """As aiohttp's parser feeds a chunked body: each HTTP chunk marked."""
    for chunk in chunks:
        made.begin_http_chunk_receiving()
        made.feed_data(chunk)
        made.end_http_chunk_receiving()


async def test_a_read_takes_every_buffered_chunk_in_one_join(monkeypatch: pytest.MonkeyPatch) -> None:
    made, _ = reader(whole=True)
    assert type(made) is tuning.WholeReads
    events = [b'data: {"n":%d}\n\n' % i for i in range(64)]
    feed(made, events)

    def per_chunk(self: StreamReader, n: int) -> bytes:
        raise AssertionError("a whole read went chunk by chunk")

    with monkeypatch.context() as patched:
        patched.setattr(StreamReader, "_read_nowait_chunk", per_chunk)
        assert await made.readany() == b"".join(events)
    feed(made, [b"data: [DONE]\n\n"])
    made.feed_eof()
    assert await made.readany() == b"data: [DONE]\n\n"
    assert await made.readany() == b""
    assert made.is_eof() and made.total_bytes == sum(map(len, events)) + 14


async def test_reads_match_aiohttps_own_reader_chunk_for_chunk() -> None:
    """Random bursts of random chunks, read with readany() and read(n) in turn: the same bytes in the
    same pieces from both readers, and the same bookkeeping after each read."""
    rnd = random.Random(7)
    ours, _ = reader(whole=True)
    theirs, _ = reader(whole=False)
    for _ in range(300):
        burst = [rnd.randbytes(rnd.randint(1, 300)) for _ in range(rnd.randint(1, 40))]
        feed(ours, burst)
        feed(theirs, burst)
        while theirs._size:
            n = rnd.choice((-1, -1, rnd.randint(1, 500)))
            got = await (ours.readany() if n == -1 else ours.read(n))
            assert got == await (theirs.readany() if n == -1 else theirs.read(n))
            assert (ours._size, ours._cursor) == (theirs._size, theirs._cursor)
            assert ours._http_chunk_splits == theirs._http_chunk_splits  # what pauses a connection of many chunks
    assert ours.total_bytes == theirs.total_bytes and ours._size == 0


async def test_a_paused_connection_is_resumed_once_the_buffer_is_drained() -> None:
    made, protocol = reader(whole=True)
    feed(made, [b"x" * 4096] * (2 * LIMIT // 4096 + 1))  # past the high-water mark
    assert protocol._reading_paused and protocol.paused >= 1
    data = await made.readany()
    assert len(data) == 2 * LIMIT + 4096 and made._size == 0
    assert not protocol._reading_paused and protocol.resumed == 1


async def test_only_a_plain_reader_changes_class() -> None:
    class Other(StreamReader):
        __slots__ = ()

    made = Other(Protocol(), LIMIT, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    tuning.drain_whole(made)
    assert type(made) is Other


async def test_a_chunked_answer_is_read_through_a_plain_reader_that_can_change_class() -> None:
    """aiohttp's parser makes the body reader ``drain_whole`` changes: a plain ``StreamReader``."""

    async def events(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(8):
            await resp.write(b"data: %d\n\n" % i)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/", events)
    body = b""
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
        resp = await session.get(server.make_url("/"))
        assert type(resp.content) is StreamReader
        tuning.drain_whole(resp.content)
        assert type(resp.content) is tuning.WholeReads
        while data := await resp.content.readany():
            body += data
    assert body == b"".join(b"data: %d\n\n" % i for i in range(8))


def test_a_stream_response_still_reads_the_head_flag_it_sets() -> None:
    """``EventStream`` flips a class attribute aiohttp's own StreamResponse declares and reads when it
    writes the head; a release that renames or drops it would send the head alone again, silently."""
    import inspect

    from aiohttp import web

    assert web.StreamResponse._send_headers_immediately is True  # type: ignore[attr-defined]
    assert tuning.EventStream._send_headers_immediately is False  # type: ignore[attr-defined]
    assert "_send_headers_immediately" in inspect.getsource(web.StreamResponse)


@pytest.fixture
async def redis_client() -> Any:
    from redis.asyncio import Redis

    client = Redis(host="127.0.0.1", port=6379)
    yield client
    await client.aclose()


async def test_packed_script_calls_answer_as_redis_pys_own(redis_client: Any) -> None:
    """Replies in order, a script's error as a value (the connection stays in step), the same
    results as the client's command API gives for the same calls."""
    script = redis_client.register_script("return {KEYS[1], ARGV[1]}")
    await script(keys=["fence:k"], args=["x"])  # loaded
    conn = tuning.RawConnection(redis_client)
    head = tuning.evalsha_head(script.sha.encode(), [b"fence:k"], 1)
    missing = tuning.evalsha_head(b"0" * 40, [b"fence:k"], 1)
    await conn.send(head + tuning.bulk(b"a\r\nb") + missing + tuning.bulk(b"") + head + tuning.bulk(b""))
    first, error, last = [await conn.read() for _ in range(3)]
    assert first == await script(keys=["fence:k"], args=[b"a\r\nb"])
    assert isinstance(error, NoScriptError)
    assert last == [b"fence:k", b""]


async def test_a_raw_connection_connects_again_after_a_failure(redis_client: Any) -> None:
    conn = tuning.RawConnection(redis_client)
    await conn.send(b"*1\r\n$4\r\nPING\r\n")
    assert await conn.read() in (b"PONG", "PONG", True)
    await conn._conn.disconnect()  # as redis-py leaves it after a failed read
    await conn.send(b"*1\r\n$4\r\nPING\r\n")
    assert await conn.read() in (b"PONG", "PONG", True)


def test_prometheus_client_histograms_still_have_what_bucket_tallies_use() -> None:
    """A child's bounds, its bucket values and its sum value, with ``get``, ``set`` and ``inc``; and
    ``observe`` still the sum's ``inc`` and the first bucket whose bound holds the amount, which
    ``BucketTally`` reproduces (its results: tests/unit/test_metrics.py)."""
    from prometheus_client import CollectorRegistry, Histogram

    child = Histogram("fence_h", "doc", ["l"], buckets=(0.1, 1), registry=CollectorRegistry()).labels("x")
    assert child._upper_bounds == [0.1, 1, float("inf")]
    assert len(child._buckets) == 3
    for value in (child._sum, *child._buckets):
        assert callable(value.get) and callable(value.set) and callable(value.inc)
    source = inspect.getsource(type(child).observe)
    assert "self._sum.inc(amount)" in source
    assert "if amount <= bound:" in source and "self._buckets[i].inc(1)" in source


def test_redis_py_still_has_what_the_raw_connection_calls(redis_client: Any) -> None:
    """The pool's per-read bound, a checkout that needs no command name, a send that can skip the
    health check, and a reply read bounded by ``socket_timeout`` (which the raw connection clears: it
    bounds a round trip as a whole)."""
    from redis.asyncio.connection import AbstractConnection, ConnectionPool

    assert "socket_timeout" in redis_client.connection_pool.connection_kwargs
    command_name = inspect.signature(ConnectionPool.get_connection).parameters["command_name"]
    assert command_name.default is None
    assert "check_health" in inspect.signature(AbstractConnection.send_packed_command).parameters
    assert isinstance(AbstractConnection.is_connected, property) and callable(AbstractConnection.connect)
    assert "self.socket_timeout" in inspect.getsource(AbstractConnection.read_response)


def test_redis_py_cluster_still_has_what_closing_its_nodes_reads() -> None:
    """``close_cluster_nodes``: the client's nodes manager, which closes its node cache or start-up
    nodes by name, and its slot table of node lists."""
    from redis.asyncio.cluster import ClusterNode, NodesManager, RedisCluster

    assert "nodes_manager" in inspect.getsource(RedisCluster.__init__)
    assert "attr" in inspect.signature(NodesManager.aclose).parameters
    assert "self.slots_cache" in inspect.getsource(NodesManager.initialize)
    assert callable(ClusterNode.disconnect)


def test_redis_py_cluster_still_has_what_sharing_its_nodes_relies_on() -> None:
    """``share_cluster_nodes``: a slotted nodes manager (its class swapped, its state kept) whose
    refresh publishes a slot table of node lists and keeps a node cache by name."""
    from redis.asyncio.cluster import NodesManager

    from gateway.runtime.internals import _SharedNodes

    assert "__dict__" not in NodesManager.__slots__ and _SharedNodes.__slots__ == ()
    source = inspect.getsource(NodesManager.initialize)
    assert "self.slots_cache = tmp_slots" in source and "self.nodes_cache" in source


def test_the_request_handler_has_every_private_name_parse_errors_relies_on() -> None:
    from aiohttp import web_protocol, web_server

    assert set(web_protocol.RequestHandler.__slots__) >= tuning.HANDLER_USES
    assert "_ErrInfo(status=400, exc=exc, message=exc.message)" in inspect.getsource(
        web_protocol.RequestHandler.data_received
    )
    assert "self._request_count += 1" in inspect.getsource(web_protocol.RequestHandler.data_received)
    assert "self.handle_error(" in inspect.getsource(web_protocol.RequestHandler._make_error_handler)
    # parse_errors builds the handler exactly as the server's own factory does
    assert "RequestHandler(self, loop=self._loop, **self._kwargs)" in inspect.getsource(web_server.Server.__call__)


@pytest.mark.parametrize(
    ("exc", "target", "status", "words"),
    [
        (aiohttp.http_exceptions.LineTooLong(b"zqx" * 40 + b"...", 8190), b"/v1/x", 431, "header line"),
        (aiohttp.http_exceptions.LineTooLong(b"/v1/x?zqx...", 8190), b"/v1/x?zqxzqx", 400, "request line"),
        (
            aiohttp.http_exceptions.BadHttpMessage("Invalid header value char:\n\n  b'X-Pri: zqx\\x7f'\n       ^"),
            b"/v1/x",
            400,
            "header X-Pri has an invalid character",
        ),
        (aiohttp.http_exceptions.InvalidHeader(b"zqx\x00"), b"", 400, "malformed"),
        (
            aiohttp.http_exceptions.BadHttpMethod(error="Invalid method encountered:\n\n  b'zqx'\n  ^"),
            b"",
            400,
            "method",
        ),
        (aiohttp.http_exceptions.BadStatusLine("zqx"), b"", 400, "bad status line"),
        (aiohttp.http_exceptions.BadHttpMessage("Duplicate 'zqx' header found."), b"", 400, "duplicate header found"),
        (aiohttp.http_exceptions.BadHttpMessage("zqx\\x00: b'zqx'"), b"", 400, "malformed request"),
        # llhttp's reasons whole, an apostrophe or a colon within them (they were cut there)
        (
            aiohttp.http_exceptions.BadHttpMessage(
                "Transfer-Encoding can't be present with Content-Length:\n\n  b'Transfer-Encoding: zqx'\n  ^"
            ),
            b"",
            400,
            "malformed: transfer-encoding can't be present with content-length",
        ),
        (
            aiohttp.http_exceptions.BadHttpMessage("Data after `Connection: close`:\n\n  b'zqx'\n     ^"),
            b"",
            400,
            "malformed: data after `connection: close`",
        ),
        (aiohttp.http_exceptions.InvalidHeader(b"X-A zqx"), b"", 400, "malformed: invalid http header"),
    ],
)
def test_a_parser_error_is_described_without_the_clients_bytes(
    exc: aiohttp.http_exceptions.HttpProcessingError, target: bytes, status: int, words: str
) -> None:
    got_status, text = tuning.describe(exc, target)
    assert got_status == status and words in text and "zqx" not in text


def test_the_request_line_found_is_the_last_in_the_head() -> None:
    head = b"GET /health HTTP/1.1\r\nHost: a\r\n\r\nP@ST /v1/messages?x=1 HTTP/1.1\r\nReferer: /v5/x\r\n"
    assert tuning.request_line(head) == ("/v1/messages", b"/v1/messages?x=1")
    assert tuning.request_line(b"\x16\x03\x01 garbage") == (None, b"")

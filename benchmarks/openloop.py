"""Open-loop load at a fixed arrival rate: the benchmark's "Fixed rate" run (Debian packages no wrk2).

Request *i* is due at ``start + i / rate``, whatever the answers are doing. A due request goes out on
an idle keep-alive connection, or on a new one (up to ``--connections``); when every connection is
busy it waits for one, and its latency still counts from the moment it was issued, so a stalled server
cannot hide its stall by slowing the client down (no coordinated omission). Latency is from then to
the answer's last byte. uvloop's timers are millisecond-grained, so requests are issued in bunches of
about ``rate / 1000`` each millisecond (a late timer delays the issue, never the measurement). Plain
HTTP/1.1 over asyncio protocols (a response is framed by its Content-Length or chunked encoding), so
the client's own cost stays small beside the subject's.

    python -m benchmarks.openloop --url http://127.0.0.1:9000/v1/completions --rate 1000 --seconds 10 \\
        --header 'Authorization: Bearer k' --body '{"model": "tiny", "prompt": "hi"}'

It prints one line, ``BENCH_JSON {...}``, in the shape of wrk's (``benchmarks/wrk/common.lua``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from benchmarks.procs import percentile

GRACE_S = 10.0  # after the last request is issued, how long answers may still take
TICK_S = 0.001


class Connection(asyncio.Protocol):
    """One keep-alive connection with at most one request out (no pipelining)."""

    def __init__(self, request: bytes, done: Callable[[Connection, float, int, int], None]) -> None:
        self.request = request
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.issued: float | None = None  # the request out, by the time it was issued
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, issued: float) -> None:
        assert self.transport is not None
        self.issued = issued
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        framed = _frame(self.buffer)
        if framed is None or self.issued is None:
            return
        status, size = framed
        issued, self.issued, self.buffer = self.issued, None, self.buffer[size:]
        self.done(self, issued, status, size)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.issued is not None:
            issued, self.issued = self.issued, None
            self.done(self, issued, 0, 0)


def _frame(buffer: bytes) -> tuple[int, int] | None:
    """(status, bytes) of the first whole response in ``buffer``, or None while it is incomplete."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].lower()
    status = int(head[9:12])
    body = end + 4
    at = head.find(b"\r\ncontent-length:")
    if at >= 0:
        stop = head.find(b"\r\n", at + 2)
        length = int(head[at + 17 : stop if stop > 0 else len(head)])
        return (status, body + length) if len(buffer) >= body + length else None
    if b"\r\ntransfer-encoding: chunked" not in head:
        raise ValueError("a response framed by neither Content-Length nor chunked encoding")
    pos = body
    while True:  # chunk sizes, to the last (empty) chunk
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size = int(buffer[pos:line_end].split(b";")[0], 16)
        pos = line_end + 2 + size + 2
        if len(buffer) < pos:
            return None
        if size == 0:
            return status, pos


async def run(
    url: str, headers: list[str], body: bytes, rate: float, seconds: float, connections: int
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lines = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    request = ("\r\n".join([*lines, *headers, f"Content-Length: {len(body)}", "", ""])).encode() + body
    total = max(1, int(rate * seconds))
    idle: list[Connection] = []
    waiting: collections.deque[float] = collections.deque()  # issue times with no connection free
    opened, latencies, received = 0, [], 0
    errors = {"status": 0, "connect": 0, "read": 0, "write": 0, "timeout": 0}
    finished = loop.create_future()
    outstanding = total
    last = 0.0

    def settle() -> None:
        nonlocal outstanding
        outstanding -= 1
        if outstanding == 0 and not finished.done():
            finished.set_result(None)

    def done(conn: Connection, issued: float, status: int, size: int) -> None:
        nonlocal received, last, opened
        now = time.perf_counter()  # uvloop's loop.time() is millisecond-grained
        if status == 0:  # the connection closed under the request
            errors["read"] += 1
            opened -= 1
        else:
            received += size
            last = now
            latencies.append(now - issued)
            if status != 200:
                errors["status"] += 1
        settle()
        if conn.lost:
            return
        if waiting:
            conn.send(waiting.popleft())
        else:
            idle.append(conn)

    async def open_and_send(issued: float) -> None:
        try:
            _, conn = await loop.create_connection(lambda: Connection(request, done), host, port)
        except OSError:
            errors["connect"] += 1
            settle()
            return
        conn.send(issued)  # issued before anything queued while this connection opened

    tasks: set[asyncio.Task[None]] = set()

    def dispatch(issued: float) -> None:
        nonlocal opened
        while idle and idle[-1].lost:  # closed by the server while idle
            idle.pop()
            opened -= 1
        if idle:
            idle.pop().send(issued)
        elif opened < connections:
            opened += 1
            task = loop.create_task(open_and_send(issued))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        else:
            waiting.append(issued)

    start = time.perf_counter() + 0.05
    i = 0
    while i < total:
        now = time.perf_counter()
        while i < total and start + i / rate <= now:
            dispatch(now)
            i += 1
        if i < total:  # uvloop's timers are ms-grained: never less, so the loop does not spin
            await asyncio.sleep(max(start + i / rate - now, TICK_S))
    try:
        await asyncio.wait_for(finished, GRACE_S)
    except TimeoutError:
        errors["timeout"] += outstanding
    return _summary(latencies, errors, received, start, last)


def _summary(
    latencies: list[float], errors: dict[str, int], received: int, start: float, last: float
) -> dict[str, Any]:
    us = sorted(x * 1e6 for x in latencies) or [0.0]

    def pct(q: float) -> int:
        return int(percentile(us, q))

    return {
        "requests": len(latencies),
        "duration_us": int(max(last - start, 0) * 1e6),
        "bytes": received,
        "errors": errors,
        "latency_us": {
            "min": int(us[0]),
            "mean": round(statistics.fmean(us), 1),
            "stdev": round(statistics.pstdev(us), 1),
            "p50": pct(50),
            "p90": pct(90),
            "p99": pct(99),
            "p999": pct(99.9),
            "max": int(us[-1]),
        },
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the full URL to POST to")
    p.add_argument("--rate", type=float, required=True, help="requests per second")
    p.add_argument("--seconds", type=float, required=True, help="how long requests keep arriving")
    p.add_argument("--connections", type=int, default=64, help="keep-alive connections at most (default 64)")
    p.add_argument("--header", action="append", default=[], help="'Name: value', repeatable")
    p.add_argument("--body", required=True, help="the JSON body")
    p.add_argument("--no-uvloop", action="store_true")
    a = p.parse_args(argv)
    if a.rate <= 0 or a.seconds <= 0:
        p.error("--rate and --seconds must be positive")
    coro = run(a.url, a.header, a.body.encode(), a.rate, a.seconds, a.connections)
    try:
        if a.no_uvloop:
            raise ImportError
        import uvloop

        result = uvloop.run(coro)
    except ImportError:
        result = asyncio.run(coro)
    print("BENCH_JSON " + json.dumps(result, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()

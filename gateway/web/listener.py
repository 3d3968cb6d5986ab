"""The gateway's listening socket: aiohttp's request handler behind a cap on each client's connections.

aiohttp bounds what a connection may cost once open (a request head must arrive within its keep-alive
timeout, ``server.idle_timeout_seconds`` here; a body within ``server.body_timeout_seconds``,
``web/body.py``) but not how many connections one client may hold open. ``Guarded`` wraps each
connection's protocol: a connection past ``server.max_connections_per_client`` from one address gets
a 429 and is closed before aiohttp sees it. The listener is ours (``loop.create_server`` with
``AppRunner.server`` as the protocol factory, both public) instead of ``web.run_app``'s, which takes
no protocol factory.

Every connection also counts against the worker's own cap, ``server.max_connections``: by default half
of what the process's descriptor limit leaves after a reserve, since a streamed request holds its
client's socket and an upstream one. Past it a connection gets a 503 and is closed at once, so a
gateway out of descriptors still serves what it holds instead of stalling new accepts (asyncio
retries a failed ``accept`` once a second) and failing upstream connects of requests it already took.
``raise_descriptor_limit`` lifts the soft limit to the hard one at start-up, as vLLM's server does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import signal
from collections.abc import Callable
from typing import cast

from aiohttp import web

from gateway.runtime.internals import parse_errors
from gateway.web.routes import OWNERS
from gateway.web.unrouted import parse_error

log = logging.getLogger("gateway")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# New connections wait in the kernel's accept queue while the loop is busy; past this many the kernel
# drops SYNs and each client waits out a 1 s retransmit. aiohttp's default, 128, fills in 130 ms at
# 1,000 connections/s. The kernel caps it at ``net.core.somaxconn`` (4096 since Linux 5.4).
BACKLOG = 4096

# Descriptors a worker keeps for its own use beyond client and upstream sockets: the listener, the
# event loop, Redis pools, replica scrapes, log and metrics files.
RESERVED_DESCRIPTORS = 128


def raise_descriptor_limit() -> int:
    """Lifts this process's soft descriptor limit to its hard one (no privilege needed) and returns
    the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):  # a sandbox that forbids it: the soft limit stands
            pass
    return soft


def connections_for(descriptors: int) -> int:
    """The connections a worker with ``descriptors`` can carry, each with an upstream connection."""
    return max(1, (descriptors - RESERVED_DESCRIPTORS) // 2)


def answer(status: str, message: str, kind: str) -> bytes:
    """The whole answer of a refused connection, in OpenAI's envelope as every answer given before a
    path is known (no dialect is known yet)."""
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}})
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return (head + body).encode()


class ClientConnections:
    """Open connections, per client address (``limit``; 0 counts nothing per address) and in all
    (``total``; 0: no cap)."""

    def __init__(self, limit: int, total: int = 0) -> None:
        self.limit = limit
        self.total = total
        self.open: dict[str, int] = {}
        self.count = 0
        self.refused = 0
        self._warned: set[str] = set()  # addresses at the cap already logged, so a flood is one line
        self._full_logged = False
        self._per_client = answer(
            "429 Too Many Requests",
            f"too many open connections from this client (limit {limit}: server.max_connections_per_client); "
            "close idle connections or reuse them",
            "rate_limit_error",
        )
        self._full = answer(
            "503 Service Unavailable",
            f"this gateway worker holds its most open connections ({total}: server.max_connections); "
            "retry shortly or elsewhere",
            "server_error",
        )

    def enter(self, host: str) -> bytes | None:
        """None when the connection may open; else the answer that refuses it."""
        if self.total and self.count >= self.total:
            self.refused += 1
            if not self._full_logged:
                self._full_logged = True
                log.warning("%d connections open, server.max_connections: refusing more", self.count)
            return self._full
        if self.limit:
            count = self.open.get(host, 0)
            if count >= self.limit:
                self.refused += 1
                if host not in self._warned:
                    self._warned.add(host)
                    log.warning("client %s holds %d connections, the cap: refusing more", host[:64], count)
                return self._per_client
            self.open[host] = count + 1
        self.count += 1
        return None

    def leave(self, host: str) -> None:
        self.count -= 1
        if self.count < self.total:
            self._full_logged = False
        if not self.limit:
            return
        count = self.open[host] - 1
        if count:
            self.open[host] = count
        else:
            del self.open[host]
        if count < self.limit:
            self._warned.discard(host)

    @staticmethod
    def refuse(transport: asyncio.BaseTransport, refusal: bytes) -> None:
        # a stream socket's transport (uvloop's does not subclass asyncio's classes): close() sends
        # what was written first
        cast(asyncio.Transport, transport).write(refusal)
        transport.close()


class Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted against its client's cap; refused, the
    connection is answered and closed and aiohttp never learns of it."""

    __slots__ = ("_clients", "_host", "_inner")

    def __init__(self, inner: asyncio.Protocol, clients: ClientConnections) -> None:
        self._inner = inner
        self._clients = clients
        self._host: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else ""  # a Unix socket's peers share ""
        refusal = self._clients.enter(host)
        if refusal is not None:
            self._clients.refuse(transport, refusal)
            return
        self._host = host
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._host is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._host is not None else None

    def pause_writing(self) -> None:
        if self._host is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._host is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._host is not None:
            self._clients.leave(self._host)
            self._inner.connection_lost(exc)


Factory = Callable[[], asyncio.Protocol]


def guarded_factory(factory: Factory, clients: ClientConnections) -> Factory:
    if clients.limit == 0 and clients.total == 0:
        return factory
    return lambda: Guarded(factory(), clients)


async def serve(
    app: web.Application, host: str, port: int, *, per_client: int, total: int | None, idle_timeout: float
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, then shut down: the listener closes at once, the app's
    ``on_shutdown`` drains requests in flight while every connection stays open (a request on a
    keep-alive connection gets its 503 at once, rather than no answer until the drain ends, which is
    what ``web.run_app`` gives: it closes the connections' handlers first), then connections close and
    the app's clean-up runs. ``total`` None: as many connections as the descriptor limit carries."""
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        keepalive_timeout=idle_timeout,
        shutdown_timeout=5.0,  # for idle connections: requests in flight are drained first (web.app)
    )
    await runner.setup()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    descriptors = raise_descriptor_limit()
    clients = ClientConnections(per_client, connections_for(descriptors) if total is None else total)
    if clients.total:
        log.info("connections capped at %d per worker (%d file descriptors)", clients.total, descriptors)
    listener: asyncio.Server | None = None
    try:
        assert runner.server is not None  # set by setup()
        factory = guarded_factory(parse_errors(runner.server, parse_error(OWNERS)), clients)
        listener = await loop.create_server(factory, host or None, port, reuse_port=True, backlog=BACKLOG)
        await stop.wait()
    finally:
        if listener is not None:
            listener.close()
            await app.shutdown()  # the drain; ``cleanup`` runs ``on_shutdown`` again, which finds it done
        await runner.cleanup()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)

"""The gateway's listening socket: aiohttp's request handler behind a cap on each client's connections.

aiohttp bounds what a connection may cost once open (a request head must arrive within its keep-alive
timeout, ``server.idle_timeout_seconds`` here; a body within ``server.body_timeout_seconds``,
``web/body.py``) but not how many connections one client may hold open. ``Guarded`` wraps each
connection's protocol: a connection past ``server.max_connections_per_client`` from one address gets
a 429 and is closed before aiohttp sees it. The listener is ours (``loop.create_server`` with
``AppRunner.server`` as the protocol factory, both public) instead of ``web.run_app``'s, which takes
no protocol factory.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Callable
from typing import cast

from aiohttp import web

log = logging.getLogger("gateway")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def refusal(limit: int) -> bytes:
    """The whole answer a connection past the cap gets, in OpenAI's envelope as every answer given
    before a path is known (no dialect is known yet)."""
    message = (
        f"too many open connections from this client (limit {limit}: server.max_connections_per_client); "
        "close idle connections or reuse them"
    )
    body = json.dumps({"error": {"message": message, "type": "rate_limit_error", "param": None, "code": None}})
    head = (
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return (head + body).encode()


class ClientConnections:
    """Open connections per client address. ``limit`` 0 counts nothing and refuses nothing."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}
        self.refused = 0
        self._warned: set[str] = set()  # addresses at the cap already logged, so a flood is one line
        self._answer = refusal(limit)

    def enter(self, host: str) -> bool:
        count = self.open.get(host, 0)
        if count >= self.limit:
            self.refused += 1
            if host not in self._warned:
                self._warned.add(host)
                log.warning("client %s holds %d connections, the cap: refusing more", host[:64], count)
            return False
        self.open[host] = count + 1
        return True

    def leave(self, host: str) -> None:
        count = self.open[host] - 1
        if count:
            self.open[host] = count
        else:
            del self.open[host]
        if count < self.limit:
            self._warned.discard(host)

    def refuse(self, transport: asyncio.BaseTransport) -> None:
        # a stream socket's transport (uvloop's does not subclass asyncio's classes): close() sends
        # what was written first
        cast(asyncio.Transport, transport).write(self._answer)
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
        if not self._clients.enter(host):
            self._clients.refuse(transport)
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
    if clients.limit == 0:
        return factory
    return lambda: Guarded(factory(), clients)


async def serve(app: web.Application, host: str, port: int, *, per_client: int, idle_timeout: float) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, then shut down as ``web.run_app`` does: the listener
    closes at once, the app's ``on_shutdown`` drains requests in flight, connections close, the app's
    clean-up runs."""
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
    clients = ClientConnections(per_client)
    listener: asyncio.Server | None = None
    try:
        assert runner.server is not None  # set by setup()
        factory = guarded_factory(runner.server, clients)
        listener = await loop.create_server(factory, host or None, port, reuse_port=True, backlog=128)
        await stop.wait()
    finally:
        if listener is not None:
            listener.close()
        await runner.cleanup()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)

"""What one client's connections may hold on a served gateway: how many at once
(``server.max_connections_per_client``) and how long a connection may take to send a request head
(``server.idle_timeout_seconds``). Served by ``llm-gateway serve`` itself: the cap lives in its
listener (``gateway/web/listener.py``), which the in-process test servers do not use."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

CAP = 3
CONFIG = (
    f"auth: none\nserver: {{max_connections_per_client: {CAP}, idle_timeout_seconds: 1}}\n"
    "models: [{name: m, targets: [{provider: mock}]}]\n"
)
BOUND = 30  # seconds: a failure guard, never reached when the gateway behaves


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


async def ask(writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> bytes:
    """One keep-alive ``GET /health`` on an open connection, its head and body."""
    writer.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(next(ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")).split(b":")[1])
    return head + await reader.readexactly(length)


async def test_connections_past_the_cap_get_429_and_the_rest_are_served(serve: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG.replace("idle_timeout_seconds: 1", "idle_timeout_seconds: 600"))
    url = (await serve(["--config", str(cfg)], {})).url
    held = [await connect(url) for _ in range(CAP)]
    for reader, writer in held:  # each is open and served: the cap counts them
        assert (await ask(writer, reader)).startswith(b"HTTP/1.1 200")

    reader, writer = await connect(url)
    answer = await asyncio.wait_for(reader.read(), BOUND)  # answered at once, then closed (EOF)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 429")
    error = json.loads(body)["error"]
    assert "server.max_connections_per_client" in error["message"] and f"limit {CAP}" in error["message"]
    writer.close()

    # A client under the cap again is served: one held connection ends, a new one opens and is answered.
    _, first = held.pop()
    first.close()
    await first.wait_closed()
    async with aiohttp.ClientSession() as session:  # a fresh connection, as a client library makes it

        async def healthy() -> int:
            async with session.get(url + "/health") as resp:
                return resp.status

        # The server has seen the close once it answers a request sent after it on another connection:
        # the FIN was queued first, and the answer takes the loop turn that ran ``connection_lost``.
        reader2, writer2 = held[0]
        assert (await ask(writer2, reader2)).startswith(b"HTTP/1.1 200")
        assert await healthy() == 200
    for _, w in held:
        w.close()


async def test_a_head_that_never_completes_is_closed(serve: Any, tmp_path: Path) -> None:
    """Bytes of a head arriving slowly do not extend the wait: the connection is closed at the idle
    timeout, with no answer (there is no request to answer)."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG)
    url = (await serve(["--config", str(cfg)], {})).url
    reader, writer = await connect(url)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\n")

    async def trickle() -> None:
        while not writer.is_closing():
            writer.write(b"X")  # one byte of a header name at a time, as slowloris sends
            await writer.drain()
            await asyncio.sleep(0.2)  # a test of time itself: a head arriving slowly, byte by byte

    dripping = asyncio.create_task(trickle())
    try:
        assert await asyncio.wait_for(reader.read(), BOUND) == b""
    finally:
        dripping.cancel()
        writer.close()


async def test_an_idle_connection_frees_its_place_under_the_cap(serve: Any, tmp_path: Path) -> None:
    """Connections left idle are closed at the idle timeout, and their places under the cap come back."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG)
    url = (await serve(["--config", str(cfg)], {})).url
    held = [await connect(url) for _ in range(CAP)]
    for reader, _ in held:  # the server closes each (EOF) once it has been idle for the timeout
        assert await asyncio.wait_for(reader.read(), BOUND) == b""
    reader, writer = await connect(url)
    assert (await ask(writer, reader)).startswith(b"HTTP/1.1 200")
    for _, w in [*held, (reader, writer)]:
        w.close()


async def refused_503(url: str) -> dict[str, Any]:
    """A connection past the worker's cap: answered 503 at once and closed; the error."""
    reader, writer = await connect(url)
    answer = await asyncio.wait_for(reader.read(), BOUND)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), head
    error: dict[str, Any] = json.loads(body)["error"]
    return error


async def test_a_worker_past_its_connection_cap_answers_503(serve: Any, tmp_path: Path) -> None:
    """``server.max_connections`` counts every client's connections together; a place comes back when
    one closes."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG.replace(f"max_connections_per_client: {CAP}", "max_connections: 2").replace(": 1}", ": 600}"))
    url = (await serve(["--config", str(cfg)], {})).url
    held = [await connect(url) for _ in range(2)]
    for reader, writer in held:
        assert (await ask(writer, reader)).startswith(b"HTTP/1.1 200")
    error = await refused_503(url)
    assert "server.max_connections" in error["message"] and "(2:" in error["message"]
    _, first = held.pop()
    first.close()
    await first.wait_closed()
    reader2, writer2 = held[0]  # as above: an answer on another connection orders the close before it
    assert (await ask(writer2, reader2)).startswith(b"HTTP/1.1 200")
    reader, writer = await connect(url)
    assert (await ask(writer, reader)).startswith(b"HTTP/1.1 200")
    for _, w in [*held, (reader, writer)]:
        w.close()


async def test_the_default_cap_follows_the_descriptor_limit(serve: Any, tmp_path: Path) -> None:
    """Unset, the cap is what the descriptor limit carries with an upstream socket per connection: a
    gateway started with a soft limit of 200 and a hard one of 300 lifts the soft one to 300 and holds
    (300 - 128) // 2 = 86 connections; the 87th is refused, not left to fail on a descriptor."""
    cfg = tmp_path / "gw.yaml"
    # idle connections are not closed while the test opens the rest
    cfg.write_text(CONFIG.replace(f"{CAP}, idle_timeout_seconds: 1", "0, idle_timeout_seconds: 600"))
    url = (await serve(["--config", str(cfg)], {}, nofile=(200, 300))).url
    held = [await connect(url) for _ in range(86)]
    for reader, writer in held:
        assert (await ask(writer, reader)).startswith(b"HTTP/1.1 200")
    assert "(86:" in (await refused_503(url))["message"]
    for _, w in held:
        w.close()

"""A proxy in front of a fake upstream that cuts its answers at any byte: the fault positions of a
false-ending check (``tests/integration/test_false_endings.py``).

Each request is forwarded to ``origin`` as it came, and the answer written back on a raw socket, its
body cut after ``cut.at`` bytes (the body only: the head always goes whole), and then ended as
``cut.how`` says:

* ``reset``: the connection reset (RST), in a chunked body;
* ``fin``: the connection closed (FIN) in a chunked body without its last chunk, the cut inside a
  chunk (or, at a chunk's start, after its size line);
* ``clean``: a chunked body ended with its last chunk at the cut: the upstream ended the answer there;
* ``eof``: a body framed by the connection's end (no length, not chunked), closed at the cut: to its
  reader, the same as ``clean``;
* ``short``: a whole answer's ``Content-Length`` the whole, then the connection closed at the cut.

A stream goes out an SSE event a write (``paced``: a short pause after each, so each is its own read,
as a model server writes them), else in one write. Imports nothing of the gateway's."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass

import aiohttp

HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive"})


@dataclass(frozen=True, slots=True)
class Cut:
    at: int | None  # bytes of the body written; None: the whole
    how: str = "clean"
    paced: bool = True


class CutProxy:
    """The proxy; ``url`` once ``start``ed. ``cut`` applies to every answer until changed;
    ``bodies`` keeps the last answer's whole body, as the origin wrote it."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.cut = Cut(None)
        self.body = b""
        self.url = ""
        self._server: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> CutProxy:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._session is not None:
            await self._session.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = dict(line.split(": ", 1) for line in lines[1:] if line)
        size = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
        sent = await reader.readexactly(size)
        forwarded = {k: v for k, v in headers.items() if k.lower() not in HOP}
        assert self._session is not None
        async with self._session.request(method, self.origin + path, data=sent, headers=forwarded) as resp:
            status, kind, body = resp.status, resp.headers.get("Content-Type", ""), await resp.read()
        self.body = body
        try:
            await self._answer(writer, status, kind, body)
        except ConnectionError:
            writer.transport.abort()

    async def _answer(self, writer: asyncio.StreamWriter, status: int, kind: str, body: bytes) -> None:
        cut = self.cut
        at = len(body) if cut.at is None else min(cut.at, len(body))
        stream = kind.startswith("text/event-stream")
        head = f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nConnection: close\r\n"
        if cut.how == "short":
            writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body[:at])
            await self._end(writer, fin=True)
            return
        chunked = cut.how != "eof"
        writer.write((head + ("Transfer-Encoding: chunked\r\n" if chunked else "") + "\r\n").encode())
        pieces = events(body) if stream and cut.paced else [body]
        done = 0
        for piece in pieces:
            part = piece[: max(0, at - done)]
            whole = len(part) == len(piece)
            if part or (not whole and cut.how == "fin"):
                size = len(piece) if cut.how == "fin" else len(part)
                closed = b"\r\n" if whole or cut.how == "clean" else b""  # a chunk the cut leaves open
                writer.write(f"{size:x}\r\n".encode() + part + closed if chunked else part)
                await writer.drain()
                if cut.paced:
                    await asyncio.sleep(0.002)
            done += len(piece)
            if not whole:
                break
        if at == len(body) or cut.how == "clean":
            if chunked:
                writer.write(b"0\r\n\r\n")
            await self._end(writer, fin=True)
            return
        await self._end(writer, fin=cut.how != "reset")

    @staticmethod
    async def _end(writer: asyncio.StreamWriter, fin: bool) -> None:
        await writer.drain()
        if not fin:  # SO_LINGER 0: close sends RST, not FIN
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def events(body: bytes) -> list[bytes]:
    """An SSE body's events, each with its blank line; what follows the last one apart."""
    out, start = [], 0
    while (end := body.find(b"\n\n", start)) >= 0:
        out.append(body[start : end + 2])
        start = end + 2
    return [*out, body[start:]] if start < len(body) else out


def offsets(body: bytes) -> list[int]:
    """Where to cut ``body``: at each SSE event's start, a byte either side, and its middle; for a
    body that is not a stream, every 7th byte and its last few."""
    pieces = events(body)
    if len(pieces) < 2:
        return sorted({*range(0, len(body), 7), *range(max(0, len(body) - 3), len(body))})
    marks: set[int] = set()
    start = 0
    for piece in pieces:
        marks |= {start - 1, start, start + 1, start + len(piece) // 2, start + len(piece) - 3}
        start += len(piece)
    return sorted(m for m in marks if 0 <= m < len(body))

"""A request body that never completes (shorter than its Content-Length, or chunked with no last chunk)
gets 408 in the client's dialect once ``server.body_timeout_seconds`` has passed, instead of holding its
connection for as long as the client likes; a body that arrives in pieces in time is served."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import INGRESSES, Ingress
from tests.support import eventually

BODY_TIMEOUT = 0.5


async def start(gateway: GatewayFactory, upstream: Any, **server: Any) -> Any:
    fake = await upstream("openai")
    return await gateway(config([{"name": "m", "targets": [target(fake, "openai")]}], server=server))


def head(ingress: Ingress, framing: str, length: int) -> bytes:
    path, headers, _ = ingress.request("m", "hi", False)
    lines = [f"POST {path} HTTP/1.1", "Host: gw", *(f"{name}: {value}" for name, value in headers.items())]
    lines.append(f"Content-Length: {length}" if framing == "length" else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def answer(reader: asyncio.StreamReader) -> tuple[int, Any]:
    """The response's status and JSON body, read by its Content-Length (the connection stays open)."""
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, json.loads(await reader.readexactly(length))


async def unfinished(gw: Any, ingress: Ingress, framing: str) -> tuple[int, Any, float]:
    """Sends a request's head and half its body, never the rest: the answer, and when it came."""
    body = json.dumps(ingress.request("m", "hi", False)[2]).encode()
    half = body[: len(body) // 2]
    reader, writer = await asyncio.open_connection(gw.server.host, gw.server.port)
    loop = asyncio.get_running_loop()
    try:
        began = loop.time()
        writer.write(head(ingress, framing, len(body)) + (half if framing == "length" else chunk(half)))
        await writer.drain()
        status, reply = await asyncio.wait_for(answer(reader), 20 * BODY_TIMEOUT)
        return status, reply, loop.time() - began
    finally:
        writer.close()


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_body_that_never_ends_gets_408_in_the_dialect(
    gateway: GatewayFactory, upstream: Any, framing: str
) -> None:
    gw = await start(gateway, upstream, body_timeout_seconds=BODY_TIMEOUT)
    got = await asyncio.gather(*(unfinished(gw, ingress, framing) for ingress in INGRESSES))
    for ingress, (status, reply, seconds) in zip(INGRESSES, got, strict=True):
        assert status == 408, (ingress.name, reply)
        assert "did not arrive whole" in json.dumps(reply), (ingress.name, reply)
        assert seconds >= BODY_TIMEOUT * 0.9, (ingress.name, seconds)
        if ingress.path.startswith(("/v4", "/v5")):
            assert "detail" in reply, reply  # SGP's envelope
        elif ingress.name == "octoai":  # told by its headers, the body unread
            assert reply["object"] == "error" and reply["type"] == "request_timeout", reply
        else:
            assert reply["error"]["code"] == "request_timeout", reply


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_body_sent_in_pieces_in_time_is_served(gateway: GatewayFactory, upstream: Any, framing: str) -> None:
    gw = await start(gateway, upstream)  # the default bound, far above this test's pauses
    ingress = INGRESSES[0]
    body = json.dumps(ingress.request("m", "hi", False)[2]).encode()
    first, rest = body[:10], body[10:]
    reader, writer = await asyncio.open_connection(gw.server.host, gw.server.port)
    try:
        writer.write(head(ingress, framing, len(body)) + (first if framing == "length" else chunk(first)))
        await writer.drain()
        app = gw.server.app[GATEWAY]
        await eventually(lambda: app.in_flight.tasks, "the handler reading a body not yet whole")
        writer.write(rest if framing == "length" else chunk(rest) + b"0\r\n\r\n")
        await writer.drain()
        status, reply = await asyncio.wait_for(answer(reader), 10)
    finally:
        writer.close()
    assert status == 200, reply

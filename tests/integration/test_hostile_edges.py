"""What arrives before the body is parsed: content encodings and credential headers of any bytes. Every
ingress path answers each case in its own dialect with a 4xx naming what is wrong, never a 5xx."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import pytest

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import INGRESSES, KEY, Ingress

SMALL_CAP = 64 * 1024


@pytest.fixture
async def gw(gateway: GatewayFactory, upstream: Any) -> Any:
    server = await upstream("openai")
    cfg = config([{"name": "m", "targets": [target(server, "openai")]}], server={"max_body_bytes": SMALL_CAP})
    return await gateway(cfg)


async def raw_request(
    gw: Any, path: str, headers: list[tuple[bytes, bytes]], body: bytes, method: bytes = b"POST"
) -> tuple[int, Any]:
    """One request over a bare socket: header values go out as the bytes given, which no HTTP client
    library sends."""
    import asyncio

    reader, writer = await asyncio.open_connection(gw.server.host, gw.server.port)
    head = [method + b" " + path.encode() + b" HTTP/1.0", b"Host: gw"]  # 1.0: an answer without chunks
    head += [name + b": " + value for name, value in headers]
    head.append(b"Content-Length: %d" % len(body))
    writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload)


async def post(gw: Any, ingress: Ingress, body: bytes, **headers: str) -> tuple[int, Any]:
    path, base, _ = ingress.request("m", "hi", False)
    async with gw.session.post(gw.url + path, data=body, headers={**base, **headers}) as resp:
        return resp.status, await resp.json(content_type=None)


def body_of(ingress: Ingress) -> bytes:
    return json.dumps(ingress.request("m", "hi", False)[2]).encode()


def in_dialect(reply: Any) -> bool:
    """Every dialect's error envelope is a JSON object carrying a message somewhere in it."""
    return isinstance(reply, dict) and ("message" in json.dumps(reply) or "detail" in reply)


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_gzip_and_deflate_bodies_are_decoded(gw: Any, ingress: Ingress) -> None:
    body = body_of(ingress)
    assert (await post(gw, ingress, gzip.compress(body), **{"Content-Encoding": "gzip"}))[0] == 200
    assert (await post(gw, ingress, zlib.compress(body), **{"Content-Encoding": "deflate"}))[0] == 200
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    sent = raw_deflate.compress(body) + raw_deflate.flush()
    assert (await post(gw, ingress, sent, **{"Content-Encoding": "deflate"}))[0] == 200


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
@pytest.mark.parametrize(
    ("encoding", "make", "status"),
    [
        ("gzip", lambda b: b, 400),  # plain JSON that claims to be gzip
        ("gzip", lambda b: gzip.compress(b)[:-9], 400),  # cut short
        ("deflate", lambda b: b"\x00garbage", 400),
        ("br", lambda b: b, 415),
        ("zstd", lambda b: b, 415),
        ("gzip, br", lambda b: b, 415),
    ],
)
async def test_bodies_that_cannot_be_decoded_are_refused_in_the_dialect(
    gw: Any, ingress: Ingress, encoding: str, make: Any, status: int
) -> None:
    got, reply = await post(gw, ingress, make(body_of(ingress)), **{"Content-Encoding": encoding})
    if status == 400 and ingress.name.startswith("sgp"):
        status = 422  # SGP answers what it cannot read as FastAPI does
    assert got == status and in_dialect(reply) and "Content-Encoding" in json.dumps(reply), reply


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_a_small_body_that_inflates_past_the_cap_is_413(gw: Any, ingress: Ingress) -> None:
    bomb = gzip.compress(b" " * (SMALL_CAP * 16) + body_of(ingress))
    assert len(bomb) < SMALL_CAP
    got, reply = await post(gw, ingress, bomb, **{"Content-Encoding": "gzip"})
    assert got == 413 and in_dialect(reply)


KEYS = [b"\xff", b"gwk_" + b"0" * 12 + b"_secret\xa0", b"\xc3\x28", KEY.encode() + b"\xa0", b"gwk_\xff\xfe_x"]


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
@pytest.mark.parametrize("key", KEYS, ids=repr)
async def test_a_key_of_any_bytes_is_401_in_the_dialect(gw: Any, ingress: Ingress, key: bytes) -> None:
    path, headers, body = ingress.request("m", "hi", False)
    sent = [(name.encode(), value.encode()) for name, value in headers.items() if KEY not in value]
    auth = next(name for name, value in headers.items() if KEY in value)
    value = headers[auth].replace(KEY, "\x00").encode().replace(b"\x00", key)
    status, reply = await raw_request(gw, path, [*sent, (auth.encode(), value)], json.dumps(body).encode())
    assert status == 401 and in_dialect(reply), reply


@pytest.mark.parametrize("path", ["/admin/keys", "/admin/teams"])
@pytest.mark.parametrize("key", KEYS, ids=repr)
async def test_an_admin_key_of_any_bytes_is_refused(
    gateway: GatewayFactory, path: str, key: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_GATEWAY_ADMIN_KEY", "admin-secret")
    gw = await gateway(config([]))
    status, reply = await raw_request(gw, path, [(b"Authorization", b"Bearer " + key)], b"", b"GET")
    assert status == 401 and "admin" in json.dumps(reply)

"""A request's body as bytes, whatever ``Content-Encoding`` it came in, within the size cap.

aiohttp's own decoding is off for the gateway's server (``auto_decompress=False`` in ``web/app.py``):
it answers a body it cannot decode with a plain-text 400 before any handler runs, and a body that is
not the gzip it claims with a 500. Here ``identity``, ``gzip`` and ``deflate`` are decoded, with the
decoded size capped as the raw size is (a small gzip can inflate a thousandfold), and anything else
is refused with 415; every refusal is a ``GatewayError``, so the client gets it in its own dialect.

A body must arrive whole within ``server.body_timeout_seconds``, else 408: aiohttp bounds the wait for
a request's head (its keep-alive timeout) but not for its body once the handler runs.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web

from gateway.core.errors import InvalidRequest, PayloadTooLarge, RequestTimeout, UnsupportedMediaType
from gateway.web.state import GATEWAY

ACCEPTED = ("identity", "gzip", "deflate")
# zlib's window bits: 16 + MAX_WBITS reads a gzip member, MAX_WBITS a zlib stream, -MAX_WBITS raw deflate
# (which some clients send as "deflate", against RFC 9110).
GZIP, ZLIB, RAW = 16 + zlib.MAX_WBITS, zlib.MAX_WBITS, -zlib.MAX_WBITS


async def read_body(request: web.Request) -> bytes:
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower() or "identity"
    if encoding not in ACCEPTED and encoding != "x-gzip":
        raise UnsupportedMediaType(
            f"Content-Encoding {encoding[:40]!r} is not supported: send {', '.join(ACCEPTED)}", param="Content-Encoding"
        )
    seconds = request.app[GATEWAY].config.server.body_timeout_seconds
    try:
        if request.content.is_eof():  # most bodies came with their head: no timer to arm
            raw = await request.read()
        else:
            async with asyncio.timeout(seconds):
                raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(
            f"request body is larger than {request.client_max_size} bytes (server.max_body_bytes)"
        ) from None
    except TimeoutError:
        raise RequestTimeout(f"request body did not arrive whole within {seconds:g} s") from None
    if encoding == "identity":
        return raw
    return decode(raw, encoding, request.client_max_size)


def decode(raw: bytes, encoding: str, limit: int) -> bytes:
    """``raw`` decoded from ``encoding`` (gzip or deflate), at most ``limit`` bytes of it."""
    if encoding == "deflate":
        try:  # a zlib stream, as RFC 9110 says; else raw deflate, as some clients send
            return _inflate(raw, ZLIB, limit)
        except zlib.error:
            pass
    try:
        return _inflate(raw, GZIP if encoding != "deflate" else RAW, limit)
    except zlib.error:
        raise InvalidRequest(
            f"request body is not valid {encoding} data, as its Content-Encoding says", param="Content-Encoding"
        ) from None


def _inflate(raw: bytes, wbits: int, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    out = inflater.decompress(raw, limit + 1)  # one byte past the cap tells "too large" apart
    if len(out) > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes once decoded (server.max_body_bytes)")
    if not inflater.eof:
        raise zlib.error("truncated")
    return out

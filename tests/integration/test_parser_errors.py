"""Requests aiohttp's HTTP parser refuses before any route runs (a header line past 8190 bytes, a
control character in a header value, a bad header name, an over-long request line, a bad method, a
bad chunk size) are answered in the dialect of their path, 400 or 431, naming what is wrong without
quoting the client's bytes back, and the connection is closed. Sent as raw bytes (clients refuse to
send them) to ``llm-gateway serve`` itself, whose listener installs the handler
(``gateway.runtime.internals.ParseErrors``)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.web.routes import COUNT_TOKENS_PATH, ROUTES

CONFIG = "auth: none\nmodels: [{name: m, targets: [{provider: mock}]}]\n"
BOUND = 30  # seconds: a failure guard, never reached when the gateway behaves
SECRET = b"zqxsecret"  # in every offending part: the answer must not carry it
PATHS = sorted({spec.path for spec in ROUTES} | {COUNT_TOKENS_PATH})

# kind -> (request bytes for a path, status, words the message must hold)
KINDS: dict[str, tuple[Any, int, tuple[str, ...]]] = {
    "long_header": (
        lambda p: b"POST %s HTTP/1.1\r\nHost: gw\r\nX-Pad: %s%s\r\n\r\n" % (p, SECRET, b"x" * 9000),
        431,
        ("header line", "8190"),
    ),
    "del_in_value": (
        lambda p: b"POST %s HTTP/1.1\r\nHost: gw\r\nX-Gateway-Priority: %s\x7f\r\n\r\n" % (p, SECRET),
        400,
        ("X-Gateway-Priority", "invalid character"),
    ),
    "nul_in_value": (
        lambda p: b"POST %s HTTP/1.1\r\nHost: gw\r\nX-Gateway-Priority: %s\x00\r\n\r\n" % (p, SECRET),
        400,
        ("X-Gateway-Priority", "invalid character"),
    ),
    "bad_header_name": (
        lambda p: b"POST %s HTTP/1.1\r\nHost: gw\r\nX %s: 1\r\n\r\n" % (p, SECRET),
        400,
        ("header",),
    ),
    "long_request_line": (
        lambda p: b"POST %s?q=%s%s HTTP/1.1\r\nHost: gw\r\n\r\n" % (p, SECRET, b"a" * 9000),
        400,
        ("request line", "8190"),
    ),
    "bad_method": (
        lambda p: b"P@ST%s %s HTTP/1.1\r\nHost: gw\r\n\r\n" % (SECRET, p),
        400,
        ("method",),
    ),
    "bad_chunk_size": (
        lambda p: (
            b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n%s\r\n{}\r\n0\r\n\r\n" % (p, SECRET)
        ),
        400,
        ("chunk",),
    ),
}


def message(path: str, body: Any) -> str:
    """The message of ``path``'s dialect's error envelope, its shape checked."""
    if path.startswith(("/v4/", "/v5/")):  # SGP: FastAPI's
        assert isinstance(body["detail"], str)
        return str(body["detail"])
    if path.startswith("/v1/messages"):  # Anthropic's
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        return str(body["error"]["message"])
    if path.startswith(("/serverless/", "/dedicated/")):  # Friendli's: both forms
        assert body["message"] == body["error"]["message"]
        return str(body["message"])
    assert set(body) == {"error"} and body["error"]["type"] == "invalid_request_error"  # OpenAI's
    return str(body["error"]["message"])


async def exchange(url: str, raw: bytes) -> bytes:
    """Sends ``raw`` and reads until the gateway closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(raw)
    try:
        return await asyncio.wait_for(reader.read(), BOUND)  # EOF: closed, as aiohttp closes it
    finally:
        writer.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_parser_refusals_are_answered_in_the_paths_dialect(serve: Any, tmp_path: Path, kind: str) -> None:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG)
    served = await serve(["--config", str(cfg)], {})
    build, status, words = KINDS[kind]
    wrong = []
    for path in PATHS:
        answer = await exchange(served.url, build(path.encode()))
        head, _, raw = answer.partition(b"\r\n\r\n")
        try:
            assert re.match(rb"HTTP/1\.[01] %d " % status, head), head[:40]
            assert b"content-type: application/json" in head.lower()
            assert SECRET not in answer
            said = message(path, json.loads(raw))
            assert all(w.lower() in said.lower() for w in words), said
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            wrong.append(f"{path}: {exc!r} in {answer[:300]!r}")
    assert not wrong, "\n".join(wrong)
    assert served.proc.poll() is None  # still serving


async def test_a_refusal_after_a_served_request_takes_its_own_paths_dialect(serve: Any, tmp_path: Path) -> None:
    """On a keep-alive connection the refused head is the second: its path, not the first's, decides."""
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG)
    served = await serve(["--config", str(cfg)], {})
    host, port = served.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND)
        assert first.startswith(b"HTTP/1.1 200")
        length = int(next(ln for ln in first.split(b"\r\n") if ln.lower().startswith(b"content-length")).split(b":")[1])
        await reader.readexactly(length)
        writer.write(KINDS["del_in_value"][0](b"/v1/messages"))
        answer = await asyncio.wait_for(reader.read(), BOUND)
    finally:
        writer.close()
    head, _, raw = answer.partition(b"\r\n\r\n")
    assert re.match(rb"HTTP/1\.[01] 400 ", head) and SECRET not in answer
    assert "X-Gateway-Priority" in message("/v1/messages", json.loads(raw))

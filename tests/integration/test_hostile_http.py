"""Hostile HTTP at every ingress path, sent as raw bytes (no client library sends them): header values
of any bytes on every header the gateway reads, request targets and methods no route takes, content
types, encodings and framings of every kind, JSON that is not an object or not quite JSON, numbers at
and past every bound, a client that hangs up mid-body or mid-stream.

Each answer is checked the same way: never a 5xx, a 4xx in the envelope of the dialect that owns the
path, JSON (a HEAD's answer has no body), and the gateway answers the next request. The HTTP parser's
own refusals are ``test_parser_errors``' (``llm-gateway serve`` installs that handler); the body fuzzing
is ``test_ingress_fuzz``'s.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.conftest import Gateway, GatewayFactory, config, target
from tests.integration.dialect_clients import KEY

JSON = Any
BOUND = 20.0  # seconds: a hang, never reached when the gateway behaves
OPENAI = {"Authorization": f"Bearer {KEY}"}
FRIENDLI = {**OPENAI, "X-Friendli-Team": "team1"}
SGP = {"x-api-key": KEY, "x-selected-account-id": "team1"}
ANTHROPIC = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
OCTOAI = {**OPENAI, "X-Fern-SDK-Name": "octoai"}
CHAT = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"max_tokens": 4, "prompt": "hi"}


@dataclass(frozen=True)
class Path:
    path: str
    dialect: str  # whose envelope answers: openai, friendli, sgp, anthropic, octoai
    headers: dict[str, str]
    body: dict[str, JSON]

    def __str__(self) -> str:
        return f"{self.dialect}:{self.path}"


PATHS = [
    Path("/v1/completions", "openai", OPENAI, COMPLETION),
    Path("/v1/chat/completions", "openai", OPENAI, CHAT),
    Path("/v1/responses", "openai", OPENAI, {"input": "hi", "max_output_tokens": 4, "store": False}),
    Path("/v1/embeddings", "openai", OPENAI, {"input": "hi"}),
    Path("/serverless/v1/completions", "friendli", FRIENDLI, COMPLETION),
    Path("/serverless/v1/chat/completions", "friendli", FRIENDLI, CHAT),
    Path("/dedicated/v1/completions", "friendli", FRIENDLI, COMPLETION),
    Path("/dedicated/v1/chat/completions", "friendli", FRIENDLI, CHAT),
    Path("/v1/completions", "friendli", FRIENDLI, COMPLETION),  # friendli-client's base
    Path("/v4/beta/completions", "sgp", SGP, COMPLETION),
    Path("/v4/beta/chat/completions", "sgp", SGP, CHAT),
    Path("/v5/completions", "sgp", SGP, COMPLETION),
    Path("/v5/chat/completions", "sgp", SGP, CHAT),
    Path("/v1/messages", "anthropic", ANTHROPIC, CHAT),
    Path("/v1/messages/count_tokens", "anthropic", ANTHROPIC, {"messages": CHAT["messages"]}),
    Path("/v1/chat/completions", "octoai", OCTOAI, CHAT),
    Path("/v1/completions", "octoai", OCTOAI, COMPLETION),
]


def in_envelope(dialect: str, reply: JSON) -> str:
    """The message of ``reply``, once it is ``dialect``'s error envelope."""
    assert isinstance(reply, dict), reply
    if dialect == "sgp":  # FastAPI's: a string, or a 422's list; the field named beside it
        assert set(reply) <= {"detail", "param"}, reply
        detail = reply["detail"]
        return detail if isinstance(detail, str) else " ".join(d["msg"] for d in detail)
    if dialect == "anthropic":
        assert set(reply) == {"type", "error"} and reply["type"] == "error", reply
        return str(reply["error"]["message"])
    if dialect == "octoai":
        assert reply["object"] == "error" and isinstance(reply["message"], str), reply
        return str(reply["message"])
    if dialect == "friendli":
        assert set(reply) == {"message", "error"} and reply["message"] == reply["error"]["message"], reply
    else:
        assert set(reply) == {"error"} and set(reply["error"]) == {"message", "type", "param", "code"}, reply
    return str(reply["error"]["message"])


@dataclass
class Reply:
    status: int
    head: bytes
    body: bytes

    def json(self) -> JSON:
        return json.loads(self.body)


async def exchange(gw: Gateway, raw: bytes) -> Reply:
    """Sends ``raw`` (an HTTP/1.0 request, so the answer ends with the connection) and reads it all."""
    reader, writer = await asyncio.open_connection(gw.server.host, gw.server.port)
    try:
        writer.write(raw)
        answer = await asyncio.wait_for(reader.read(), BOUND)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return Reply(int(head.split(b" ", 2)[1]), head, body)


def request(
    method: str, target: str | bytes, headers: dict[str, str | bytes], body: bytes = b"", length: bool = True
) -> bytes:
    """An HTTP/1.0 request of exactly these bytes (``length``: with a Content-Length of the body's)."""
    target = target if isinstance(target, bytes) else target.encode()
    lines = [method.encode() + b" " + target + b" HTTP/1.0", b"Host: gw"]
    lines += [k.encode() + b": " + (v if isinstance(v, bytes) else v.encode()) for k, v in headers.items()]
    if length:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def body_of(p: Path, model: str = "m") -> bytes:
    return json.dumps({"model": "e" if "embeddings" in p.path else model, **p.body}).encode()


def refused(p: Path, reply: Reply, *statuses: int) -> str:
    """The message of a refusal in ``p``'s dialect, with one of ``statuses`` (any 4xx if none)."""
    assert reply.status in statuses if statuses else 400 <= reply.status < 500, (reply.status, reply.body[:300])
    assert b"content-type: application/json" in reply.head.lower(), reply.head
    return in_envelope(p.dialect, reply.json())


async def still_serving(gw: Gateway) -> None:
    p = PATHS[1]
    reply = await exchange(gw, request("POST", p.path, {**p.headers, "Content-Type": "application/json"}, body_of(p)))
    assert reply.status == 200, reply.body[:300]


@pytest.fixture
async def gw(gateway: GatewayFactory, upstream: Any) -> Gateway:
    """``m``: a mock engine; ``p``: a pool of two vLLM replicas (its sessions are hashed); ``e``: an
    embedding model."""
    replicas = [(await upstream("vllm")).url for _ in range(2)]
    embedder = await upstream("openai")
    pool = {"provider": "vllm", "replicas": replicas, "model": "up-model", "api_key_env": "TEST_UPSTREAM_KEY"}
    models = [
        {"name": "m", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 0}}]},
        {"name": "p", "targets": [pool]},
        {"name": "e", "kind": "embedding", "targets": [target(embedder, "openai")]},
    ]
    return await gateway(config(models))


# --- header values of any bytes --------------------------------------------------------------------

# Every header a step of the gateway reads, and those its SDKs send
READ_HEADERS = [
    "anthropic-beta",
    "anthropic-version",
    "X-Session-Id",
    "X-Gateway-Priority",
    "X-Gateway-Resume",
    "X-Request-Id",
    "X-Friendli-Team",
    "x-selected-account-id",
    "OpenAI-Organization",
    "X-Fern-SDK-Name",
    "User-Agent",
    "traceparent",
    "Content-Encoding",
    "Content-Type",
]
# a header that names the SDK, on the paths several SDKs share: its dialect answers, whatever its value
SELECTS = {"X-Friendli-Team": ("friendli", ("/v1/completions", "/v1/chat/completions"))}
NOT_UTF8 = [b"\xff", b"beta-\xed\xa0\x80", b"caf\xe9", b"\xc3\x28,files-api-2025-04-14"]


@pytest.mark.parametrize("header", READ_HEADERS)
@pytest.mark.parametrize("model", ["m", "p"])
async def test_header_bytes_that_are_not_utf8_are_served_or_refused_in_the_dialect(
    gw: Gateway, header: str, model: str
) -> None:
    """An ``anthropic-beta`` of bytes that are not UTF-8 was a plain-text 500 (its refusal quoted
    them, and no JSON encoder writes a lone surrogate), and an ``X-Session-Id`` of them a 500 on a
    replica pool (its hash encoded them)."""
    wrong = []
    for p in PATHS:
        dialect, shared = SELECTS.get(header, (p.dialect, ()))
        answering = Path(p.path, dialect, p.headers, p.body) if p.path in shared and p.dialect != "anthropic" else p
        for value in NOT_UTF8:
            headers: dict[str, str | bytes] = {"Content-Type": "application/json", **p.headers, header: value}
            reply = await exchange(gw, request("POST", p.path, headers, body_of(p, model)))
            try:
                if reply.status != 200:
                    refused(answering, reply)
            except (AssertionError, ValueError, KeyError) as exc:
                wrong.append(f"{p} {value!r}: {exc!r}")
    assert not wrong, "\n".join(wrong)
    await still_serving(gw)

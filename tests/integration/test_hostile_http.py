"""Hostile HTTP at every ingress path, sent as raw bytes (no client library sends them): header values
of any bytes on every header the gateway reads, every other method on every route, content types,
encodings and framings of every kind, JSON that is not an object or not quite JSON, numbers at and
past every bound, query parameters of the model lists, a client that hangs up mid-body or mid-stream.

Each answer is checked the same way: never a 5xx, a 4xx in the envelope of the dialect that owns the
path, JSON (a HEAD's answer has no body), and the gateway answers the next request. The HTTP parser's
own refusals are ``test_parser_errors``' (``llm-gateway serve`` installs that handler); the body fuzzing
is ``test_ingress_fuzz``'s.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.web.state import GATEWAY
from tests.integration.conftest import Gateway, GatewayFactory, config
from tests.integration.dialect_clients import ENVELOPES, KEY, sgp
from tests.integration.test_responses import scripted_target, scripted_upstream
from tests.support.waiting import eventually

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


# a refusal naming a header (Content-Encoding) is listed under SGP's ``body`` loc, its message unquoted
READERS = {**ENVELOPES, "sgp": partial(sgp, quoted=False)}


@dataclass
class Reply:
    status: int
    head: bytes
    body: bytes

    def json(self) -> JSON:
        return json.loads(self.body)


async def exchange(gw: Gateway, raw: bytes) -> Reply:
    """Sends ``raw`` (an HTTP/1.0 request, or one that closes, so the answer ends with the connection)
    and reads it all; an interim ``100 Continue`` is passed over."""
    reader, writer = await asyncio.open_connection(gw.server.host, gw.server.port)
    try:
        writer.write(raw)
        answer = await asyncio.wait_for(reader.read(), BOUND)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 100 "):
        head, _, body = body.partition(b"\r\n\r\n")
    return Reply(int(head.split(b" ", 2)[1]), head, body)


def request(
    method: str, target: str | bytes, headers: Mapping[str, str | bytes], body: bytes = b"", length: bool = True
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
    return READERS[p.dialect](reply.json())


async def still_serving(gw: Gateway) -> None:
    p = PATHS[1]
    reply = await exchange(gw, request("POST", p.path, {**p.headers, "Content-Type": "application/json"}, body_of(p)))
    assert reply.status == 200, reply.body[:300]


@pytest.fixture
async def gw(gateway: GatewayFactory, upstream: Any) -> AsyncIterator[Gateway]:
    """``m``: a mock engine; ``p``: a pool of two vLLM replicas (its sessions are hashed); ``e``: an
    embedding model."""
    replicas = [(await upstream("vllm")).url for _ in range(2)]
    pool = {"provider": "vllm", "replicas": replicas, "model": "up-model", "api_key_env": "TEST_UPSTREAM_KEY"}
    async with scripted_upstream() as embedder:
        models = [
            {"name": "m", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 0}}]},
            {"name": "p", "targets": [pool]},
            {"name": "e", "kind": "embedding", "targets": [scripted_target(embedder)]},
        ]
        yield await gateway(config(models))


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


# the bytes HTTP lets a header value hold (RFC 9110 §5.5: visible ASCII, space, tab, and obs-text)
VALUE_BYTES = st.sampled_from([0x09, *range(0x20, 0x7F), *range(0x80, 0x100)])
header_values = st.lists(VALUE_BYTES, min_size=1, max_size=40).map(lambda b: bytes(b).strip(b" \t") or b"x")


async def test_header_values_of_any_bytes_http_allows_are_served_or_refused_in_the_dialect(gw: Gateway) -> None:
    """Hypothesis over paths, the headers the gateway reads and their values, in a worker thread while
    the gateway keeps this test's event loop."""
    loop = asyncio.get_running_loop()

    @settings(max_examples=300, deadline=timedelta(seconds=BOUND), database=None)
    @given(
        p=st.sampled_from(PATHS), header=st.sampled_from(READ_HEADERS), value=header_values, model=st.sampled_from("mp")
    )
    def fuzz(p: Path, header: str, value: bytes, model: str) -> None:
        headers: dict[str, str | bytes] = {"Content-Type": "application/json", **p.headers, header: value}
        raw = request("POST", p.path, headers, body_of(p, model))
        reply = asyncio.run_coroutine_threadsafe(exchange(gw, raw), loop).result(BOUND)
        if reply.status != 200:
            dialect, shared = SELECTS.get(header, (p.dialect, ()))
            refused(
                Path(p.path, dialect, p.headers, p.body) if p.path in shared and p.dialect != "anthropic" else p, reply
            )

    await asyncio.to_thread(fuzz)
    await still_serving(gw)


# --- content types, encodings and framings ---------------------------------------------------------

JSON_TYPE = {"Content-Type": "application/json"}


def chunked(body: bytes, size: int) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in parts) + b"0\r\n\r\n"


def http11(p: Path, extra: dict[str, str], framed: bytes) -> bytes:
    """An HTTP/1.1 request that closes after its answer, its body framed as given (no Content-Length)."""
    head = [f"POST {p.path} HTTP/1.1", "Host: gw", "Connection: close"]
    head += [f"{k}: {v}" for k, v in {**JSON_TYPE, **p.headers, **extra}.items()]
    return "\r\n".join(head).encode() + b"\r\n\r\n" + framed


def plain(p: Path, headers: dict[str, str], body: bytes | None = None) -> bytes:
    return request("POST", p.path, {**p.headers, **headers}, body_of(p) if body is None else body)


# (case, the request's bytes for a path, what it must get: "served", or a 4xx and words its message holds)
FRAMINGS: list[tuple[str, Callable[[Path], bytes], str | tuple[int, str]]] = [
    ("no content type", lambda p: plain(p, {}), "served"),
    ("text/plain", lambda p: plain(p, {"Content-Type": "text/plain"}), "served"),
    ("form", lambda p: plain(p, {"Content-Type": "application/x-www-form-urlencoded"}), "served"),
    ("multipart", lambda p: plain(p, {"Content-Type": "multipart/form-data; boundary=x"}), "served"),
    ("identity", lambda p: plain(p, {**JSON_TYPE, "Content-Encoding": "identity"}), "served"),
    ("gzip", lambda p: plain(p, {**JSON_TYPE, "Content-Encoding": "gzip"}, gzip.compress(body_of(p))), "served"),
    ("gzip, not gzipped", lambda p: plain(p, {**JSON_TYPE, "Content-Encoding": "gzip"}), (400, "Content-Encoding")),
    ("br", lambda p: plain(p, {**JSON_TYPE, "Content-Encoding": "br"}), (415, "Content-Encoding")),
    ("unknown", lambda p: plain(p, {**JSON_TYPE, "Content-Encoding": "x-zqx"}), (415, "Content-Encoding")),
    ("chunked", lambda p: http11(p, {"Transfer-Encoding": "chunked"}, chunked(body_of(p), 1 << 20)), "served"),
    ("chunked by byte", lambda p: http11(p, {"Transfer-Encoding": "chunked"}, chunked(body_of(p), 1)), "served"),
    (
        "100-continue",
        lambda p: http11(p, {"Expect": "100-continue", "Content-Length": str(len(body_of(p)))}, body_of(p)),
        "served",
    ),
    ("no body", lambda p: plain(p, JSON_TYPE, b""), (400, "JSON")),
    ("a body of spaces", lambda p: plain(p, JSON_TYPE, b" " * 4096), (400, "JSON")),
]


@pytest.mark.parametrize(("case", "build", "expected"), FRAMINGS, ids=[f[0] for f in FRAMINGS])
async def test_content_types_encodings_and_framings_get_an_answer_in_the_dialect(
    gw: Gateway, case: str, build: Callable[[Path], bytes], expected: str | tuple[int, str]
) -> None:
    """The body is JSON whatever ``Content-Type`` says (every SDK sends JSON); what cannot be decoded
    is refused naming ``Content-Encoding`` (SGP answers a 400 as FastAPI does, 422)."""
    wrong = []
    for p in PATHS:
        reply = await exchange(gw, build(p))
        try:
            if isinstance(expected, str):  # "served"
                assert reply.status == 200, (reply.status, reply.body[:300])
                continue
            status, words = expected
            status = 422 if status == 400 and p.dialect == "sgp" else status
            assert words in json.dumps(reply.json()), reply.body[:300]
            refused(p, reply, status)
        except (AssertionError, ValueError, KeyError) as exc:
            wrong.append(f"{p}: {exc!r}")
    assert not wrong, "\n".join(wrong)
    await still_serving(gw)


# --- methods on every route ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "GET", "PUT", "DELETE", "PATCH", "TRACE"])
async def test_every_other_method_on_every_route_is_405_in_the_dialect(gw: Gateway, method: str) -> None:
    """A HEAD's answer has the status and headers alone."""
    for p in PATHS:
        reply = await exchange(gw, request(method, p.path, p.headers))
        assert reply.status == 405 and "POST" in reply.head.decode(), (p, reply.head)
        if method == "HEAD":
            assert reply.body == b"", (p, reply.body)
        else:
            assert "POST" in refused(p, reply, 405), p
    await still_serving(gw)


# --- JSON that is not an object, or not quite JSON --------------------------------------------------


def spliced(p: Path, field: str, token: bytes) -> bytes:
    """``p``'s valid body with ``field`` set to the raw JSON ``token`` (last, as a repeated key wins)."""
    return body_of(p)[:-1] + b', "' + field.encode() + b'": ' + token + b"}"


# (case, body for a path, words the message holds: "" where none need be named)
NOT_QUITE_JSON: list[tuple[str, Callable[[Path], bytes], str]] = [
    ("an array", lambda p: b"[" + body_of(p) + b"]", "JSON object"),
    ("a number", lambda p: b"1", "JSON object"),
    ("a string", lambda p: b'"x"', "JSON object"),
    ("null", lambda p: b"null", "JSON object"),
    ("a byte order mark", lambda p: b"\xef\xbb\xbf" + body_of(p), "JSON"),
    ("UTF-16", lambda p: body_of(p).decode().encode("utf-16"), "JSON"),
    ("two objects", lambda p: body_of(p) * 2, "JSON"),
    ("latin-1 bytes", lambda p: spliced(p, "model", b'"caf\xe9"'), "JSON"),
    ("a lone surrogate", lambda p: spliced(p, "model", b'"\\ud800"'), "JSON"),
    ("a lone low surrogate", lambda p: spliced(p, "model", b'"\\udc00x"'), "JSON"),
    ("NUL in the model", lambda p: spliced(p, "model", b'"m\\u0000"'), "model"),
    ("a model of 100k", lambda p: spliced(p, "model", b'"' + b"m" * 100_000 + b'"'), "model"),
    ("NaN model", lambda p: spliced(p, "model", b"NaN"), "model"),
    ("deep past the cap", lambda p: spliced(p, "model", b"[" * 5000 + b"]" * 5000), ""),
    ("an unknown field 1e400", lambda p: spliced(p, "zqx", b"1e400"), "zqx"),
    ("stream as a string", lambda p: spliced(p, "stream", b'"true"'), "stream"),
    ("stream as 1", lambda p: spliced(p, "stream", b"1"), "stream"),
]


@pytest.mark.parametrize(("case", "build", "words"), NOT_QUITE_JSON, ids=[c[0] for c in NOT_QUITE_JSON])
async def test_json_that_is_not_an_object_or_not_quite_json_is_refused_in_the_dialect(
    gw: Gateway, case: str, build: Callable[[Path], bytes], words: str
) -> None:
    wrong = []
    for p in PATHS:
        if case.startswith("stream") and "count_tokens" in p.path:
            continue  # a count is no answer: it has nothing to stream
        reply = await exchange(gw, plain(p, JSON_TYPE, build(p)))
        try:
            message = refused(p, reply)
            assert words in message or words in json.dumps(reply.json()), message
        except (AssertionError, ValueError, KeyError) as exc:
            wrong.append(f"{p}: {exc!r}")
    assert not wrong, "\n".join(wrong)
    await still_serving(gw)


async def test_a_repeated_key_takes_its_last_value(gw: Gateway) -> None:
    """As every JSON library the SDKs' servers use reads it."""
    for p in PATHS:
        reply = await exchange(gw, plain(p, JSON_TYPE, spliced(p, "model", b'"zqx"')[:-1] + b', "model": "m"}'))
        assert reply.status == 200 or "embeddings" in p.path, (p, reply.body[:300])


# --- numbers at and past every bound -----------------------------------------------------------------

NUMBERS = [b"-0", b"-0.0", b"0", b"-1", b"1.0", b"1.5", b"1e20", b"1e400", b"-1e400", b"NaN", b"Infinity"]
NUMBERS += [b"9223372036854775807", b"9223372036854775808", b"18446744073709551616", b"-9223372036854775809"]
NUMBERS += [b"1" + b"0" * 400, b"5e-324", b"true", b"false", b'"1"', b'"true"', b"[]", b"{}", b"null"]
NUMERIC = ["max_tokens", "max_completion_tokens", "max_output_tokens", "n", "seed", "top_k", "top_p"]
NUMERIC += ["temperature", "logprobs", "top_logprobs", "min_tokens", "best_of", "frequency_penalty"]
FRIENDLI_ONLY = ("num_beams", "timeout_microseconds")
NUMERIC += ["presence_penalty", "repetition_penalty", "dimensions", "stream", *FRIENDLI_ONLY]


async def test_numbers_at_and_past_every_bound_are_served_or_refused_naming_the_field(gw: Gateway) -> None:
    """A float in an integer field (``max_tokens: 1.0``), a boolean or a string where a number goes,
    an integer past 2^63, -0 and numbers JSON cannot hold: served when the dialect takes the value,
    else a 4xx naming the field (Friendli's own fields on a shared path answer in Friendli's).
    Hypothesis runs in a worker thread; the gateway keeps this test's event loop."""
    loop = asyncio.get_running_loop()

    @settings(max_examples=300, deadline=timedelta(seconds=BOUND), database=None)
    @given(p=st.sampled_from(PATHS), field=st.sampled_from(NUMERIC), token=st.sampled_from(NUMBERS))
    def fuzz(p: Path, field: str, token: bytes) -> None:
        raw = plain(p, JSON_TYPE, spliced(p, field, token))
        reply = asyncio.run_coroutine_threadsafe(exchange(gw, raw), loop).result(BOUND)
        assert reply.status < 500, (reply.status, reply.body[:300])
        if reply.status >= 400:
            # Friendli's own fields pick Friendli's dialect on a path several SDKs share
            friendli = (
                field in FRIENDLI_ONLY and p.path.startswith("/v1/") and set(reply.json()) == {"message", "error"}
            )
            refused(Path(p.path, "friendli", p.headers, p.body) if friendli else p, reply)
            assert field in json.dumps(reply.json()), reply.body[:300]

    await asyncio.to_thread(fuzz)
    await still_serving(gw)


# --- query parameters on the GET routes --------------------------------------------------------------

ANTHROPIC_PATH = Path("/v1/models", "anthropic", ANTHROPIC, {})
# (query, the parameter the refusal names)
PAGE_QUERIES = [
    ("limit=-1", "limit"),
    ("limit=abc", "limit"),
    ("limit=0", "limit"),
    ("limit=1001", "limit"),
    ("limit=1.0", "limit"),
    ("limit=" + "9" * 30, "limit"),
    ("limit=", "limit"),
    ("limit=%ff", "limit"),
    ("limit=1&limit=2", "limit"),
    ("after_id=", "after_id"),
    ("after_id=%00", "after_id"),
    ("after_id=%ff%fe", "after_id"),
    ("after_id=" + "x" * 4000, "after_id"),
    ("before_id=m&after_id=m", "before_id"),
]


@pytest.mark.parametrize(("query", "param"), PAGE_QUERIES)
async def test_a_model_page_query_out_of_bounds_is_refused_naming_it(gw: Gateway, query: str, param: str) -> None:
    """Anthropic's list takes ``limit``, ``after_id`` and ``before_id``; OpenAI's takes none and reads
    past any."""
    reply = await exchange(gw, request("GET", "/v1/models?" + query, ANTHROPIC))
    assert refused(ANTHROPIC_PATH, reply, 400).startswith(param), reply.body[:300]
    for base in ("/v1/models", "/serverless/v1/models", "/v5/models", "/v1/models/m"):
        assert (await exchange(gw, request("GET", f"{base}?{query}", OPENAI))).status == 200


# --- a client that hangs up ----------------------------------------------------------------------------


async def hang_up(gw: Gateway, raw: bytes, read_first: bool) -> None:
    """Sends ``raw`` and closes the connection at once, or once the answer's first bytes came."""
    reader, writer = await asyncio.open_connection(gw.server.host, gw.server.port)
    writer.write(raw)
    await writer.drain()
    if read_first:
        assert (await asyncio.wait_for(reader.read(64), BOUND)).startswith(b"HTTP/1.")
    writer.close()
    await writer.wait_closed()


@pytest.fixture
async def slow(gateway: GatewayFactory) -> Gateway:
    """``m``: a mock engine streaming 50 tokens a second, so that a long answer is still going."""
    models = [{"name": "m", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 50}}]}]
    return await gateway(config(models))


STREAMING = [p for p in PATHS if not p.path.endswith(("/count_tokens", "/embeddings"))]


@pytest.mark.parametrize("p", STREAMING, ids=str)
async def test_a_client_that_hangs_up_mid_body_or_mid_stream_leaves_nothing_in_flight(slow: Gateway, p: Path) -> None:
    """The stream would run 80 s past the hang-up, beyond ``eventually``'s guard, had it not ended."""
    body = json.loads(body_of(p))
    body |= {"stream": True, "max_tokens" if "max_tokens" in body else "max_output_tokens": 4000}
    whole = json.dumps(body).encode()
    headers = {**JSON_TYPE, **p.headers}
    cut = request("POST", p.path, headers, whole, length=False).replace(
        b"\r\n\r\n", b"\r\nContent-Length: %d\r\n\r\n" % len(whole)
    )
    await hang_up(slow, cut[: -len(whole) // 2], read_first=False)  # mid-body
    await hang_up(slow, request("POST", p.path, headers, whole), read_first=True)  # mid-stream
    state = slow.server.app[GATEWAY]
    await eventually(lambda: not state.in_flight.tasks, "no request left in flight")
    await still_serving(slow)

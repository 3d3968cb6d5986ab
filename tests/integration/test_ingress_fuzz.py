"""Property-based fuzzing of every ingress path on a real socket, in front of a fake upstream.

Bodies are either a valid request with one to three fields given hostile values (huge or non-finite
numbers, wrong types, deep nesting, long strings and lists, capitalised unknown keys) or garbage; or a
rich valid request (content parts, tools, tool calls and results) with one or two nodes at any depth
given hostile values.
Whatever comes, the gateway answers in bounded time with no 5xx, and an error is in the answering
dialect's envelope, naming a field it was given (a body that is not JSON has no field to name).

Hypothesis runs in a worker thread with a blocking HTTP client, so the gateway keeps the test's
event loop; each path is bounded by ``max_examples`` and a per-example ``deadline``.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.dialects import ANTHROPIC, EMBEDDINGS, FRIENDLI, OPENAI, RESPONSES, SGP_V4, SGP_V5
from gateway.dialects.anthropic import CountTokensBody, MessagesBody
from gateway.dialects.base import Dialect
from gateway.dialects.friendli.schema import FriendliChatBody, FriendliCompletionBody
from gateway.dialects.octoai import OctoChatBody, OctoExtras
from gateway.dialects.openai.embeddings import EmbeddingsBody
from gateway.dialects.openai.schema import CompletionBody, OpenAIChatBody
from gateway.dialects.responses.schema import ResponsesBody
from gateway.dialects.sgp import SGPChatBody, SGPCompletionBody
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BEARER, KEY
from tests.integration.test_responses import scripted_target, scripted_upstream
from tests.support import rich_bodies

JSON = Any
ANSWER_TIMEOUT = 20.0  # seconds: a hang, not a slow answer, on a busy machine
# Per path and test; the suite's default keeps the run to seconds. GATEWAY_FUZZ_EXAMPLES=1000 is the
# 30,000-request acceptance run over the fifteen paths, two tests (CONTRIBUTING.md).
EXAMPLES = int(os.environ.get("GATEWAY_FUZZ_EXAMPLES", "60"))
OPENAI_H = {**BEARER, "Content-Type": "application/json"}
FRIENDLI_H = {**OPENAI_H, "X-Friendli-Team": "team1"}
SGP_H = {"x-api-key": KEY, "x-selected-account-id": "team1", "Content-Type": "application/json"}
ANTHROPIC_H = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}


@dataclass(frozen=True)
class Path:
    path: str
    headers: dict[str, str]
    dialect: Dialect
    chat: bool
    fields: tuple[str, ...]
    model: str = "m"  # "m": a vllm target; "o": an openai target (Responses relayed to its own route)


def names(*models: Any) -> tuple[str, ...]:
    return tuple(sorted({f.alias or n for m in models for n, f in m.model_fields.items()}))


COMPLETION_FIELDS = names(CompletionBody, FriendliCompletionBody, SGPCompletionBody, OctoExtras)
CHAT_FIELDS = names(OpenAIChatBody, FriendliChatBody, SGPChatBody, OctoChatBody)
PATHS = [
    Path("/v1/completions", OPENAI_H, OPENAI, False, COMPLETION_FIELDS),
    Path("/v1/chat/completions", OPENAI_H, OPENAI, True, CHAT_FIELDS),
    Path("/serverless/v1/completions", FRIENDLI_H, FRIENDLI, False, COMPLETION_FIELDS),
    Path("/serverless/v1/chat/completions", FRIENDLI_H, FRIENDLI, True, CHAT_FIELDS),
    Path("/dedicated/v1/completions", FRIENDLI_H, FRIENDLI, False, COMPLETION_FIELDS),
    Path("/dedicated/v1/chat/completions", FRIENDLI_H, FRIENDLI, True, CHAT_FIELDS),
    Path("/v4/beta/completions", SGP_H, SGP_V4, False, COMPLETION_FIELDS),
    Path("/v4/beta/chat/completions", SGP_H, SGP_V4, True, CHAT_FIELDS),
    Path("/v5/completions", SGP_H, SGP_V5, False, COMPLETION_FIELDS),
    Path("/v5/chat/completions", SGP_H, SGP_V5, True, CHAT_FIELDS),
    Path("/v1/messages", ANTHROPIC_H, ANTHROPIC, True, names(MessagesBody)),
    Path("/v1/messages/count_tokens", ANTHROPIC_H, ANTHROPIC, True, names(CountTokensBody)),
    Path("/v1/responses", OPENAI_H, RESPONSES, True, names(ResponsesBody)),
    Path("/v1/responses", OPENAI_H, RESPONSES, True, names(ResponsesBody), "o"),
    Path("/v1/embeddings", OPENAI_H, EMBEDDINGS, False, names(EmbeddingsBody)),
]
# The valid body each path's hostile fields are laid over, where it is not a completion or a chat.
BASES: dict[str, dict[str, JSON]] = {
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "m", "input": "hi", "max_output_tokens": 4},
    "/v1/embeddings": {"model": "e", "input": ["hi", "there"]},
}


class Raw:
    """A token written into the body as is: JSON's encoder cannot write ``1e400`` or ``[[[...``."""

    def __init__(self, text: str) -> None:
        self.text = text


class Big:
    """A large value, built when the body is written (Hypothesis prints a failing case's values)."""

    def __init__(self, name: str, value: JSON) -> None:
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"Big({self.name!r})"


def big(kind: str, k: int) -> Big:
    values = {"ints": [1] * k, "texts": ["a"] * k, "lists": [[1]] * k, "floats": [1.5] * k}
    values["map"] = {str(i): 1 for i in range(k)}
    return Big(f"{kind} x {k}", values[kind])


RAW = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e999",
    "1" + "0" * 5000,
    "[" * 300 + "]" * 300,
    "[" * 150 + "1" + "]" * 150,
]


def nest(depth: int) -> JSON:
    out: JSON = 1
    for i in range(depth):
        out = {"a": out} if i % 2 else [out]
    return out


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
# values some field takes: the request then reaches the upstream with the rest of its fields hostile
plausible = st.sampled_from([None, 0, 1, 2, 0.5, True, False, "x", [], {}, ["x"], [1], {"type": "object"}])
hostile = st.one_of(
    plausible,
    plausible,
    scalars,
    st.sampled_from(RAW).map(Raw),
    st.integers(200, 20_000).map(lambda k: Big(f"text of {k}", "x" * k)),
    st.lists(scalars, max_size=6),
    st.dictionaries(st.text(max_size=6), scalars, max_size=6),
    st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3)),
    st.integers(10, 150).map(nest),
    st.builds(big, st.sampled_from(["ints", "texts", "lists", "floats", "map"]), st.sampled_from([129, 2_049, 32_769])),
    st.just(Big("3000 messages", [{"role": "user", "content": "x"}] * 3000)),
    st.just(Big("40000 nested tokens", {"tokens": [1] * 40_000})),
)


def encode(body: JSON) -> bytes:
    raws: list[str] = []

    def default(obj: Any) -> JSON:
        if isinstance(obj, Big):
            return obj.value
        raws.append(obj.text)
        return f"@@raw{len(raws) - 1}@@"

    text = json.dumps(body, allow_nan=True, default=default)
    for i, raw in enumerate(raws):
        text = text.replace(f'"@@raw{i}@@"', raw)
    return text.encode()


def base(p: Path) -> dict[str, JSON]:
    if p.path in BASES:
        return BASES[p.path] | ({"model": p.model} if p.model != "m" else {})
    body: dict[str, JSON] = {"model": "m", "max_tokens": 4}
    return body | ({"messages": [{"role": "user", "content": "hi"}]} if p.chat else {"prompt": "hi"})


def bodies(p: Path) -> st.SearchStrategy[dict[str, JSON] | bytes]:
    """Hostile fields to lay over a valid body (a failing case prints these, not the whole body), or
    a garbage body."""
    keys = st.one_of(st.sampled_from(p.fields), st.sampled_from(p.fields).map(str.capitalize), st.text(max_size=8))
    mutated = st.dictionaries(keys, hostile, min_size=1, max_size=3)
    valid = encode(base(p))
    garbage = st.one_of(
        st.binary(max_size=64),
        st.integers(1, len(valid) - 1).map(lambda n: valid[:n]),
        st.sampled_from([b"[]", b"1", b'"x"', b"null", b"{}", b"{" * 500, b'{"model":"m"}' * 2]),
    )
    return st.one_of(mutated, mutated, mutated, garbage)


def shapes(p: Path, raw: bytes) -> set[str]:
    """The dialects that may answer: the route's, or the one ``select`` picks for this body."""
    out = {p.dialect.name}
    try:
        data = json.loads(raw)
    except ValueError:
        return out
    if isinstance(data, dict):
        out.add(p.dialect.select(data, {k.lower(): v for k, v in p.headers.items()}).name)
    return out


def named(reply: JSON, dialect: str) -> str | None:
    """The field an error names, read the dialect's way; raises when the envelope is not its own."""
    field: JSON
    if dialect in ("sgp", "sgp5"):
        detail = reply["detail"]
        if isinstance(detail, str):
            field = reply.get("param")
        else:
            assert detail[0]["loc"][0] == "body" and isinstance(detail[0]["msg"], str)
            field = detail[0]["loc"][1] if len(detail[0]["loc"]) > 1 else None
    elif dialect == "anthropic":  # no field of its own: the message quotes it
        assert reply["type"] == "error" and isinstance(reply["error"]["message"], str), reply
        assert reply["error"]["type"].endswith("_error") or reply["error"]["type"] == "request_too_large"
        field = None
    elif dialect == "octoai":
        assert reply["object"] == "error" and isinstance(reply["message"], str)
        field = reply["param"]
    else:
        if dialect in ("friendli", "friendli2024"):
            assert reply["message"] == reply["error"]["message"]
        assert isinstance(reply["error"]["message"], str)
        field = reply["error"]["param"]
    assert field is None or isinstance(field, str)
    return field


def message(reply: JSON) -> str:
    return json.dumps(reply)


def texts(value: JSON) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


def check(p: Path, raw: bytes, given_fields: frozenset[str], status: int, answer: bytes) -> None:
    assert status < 500, (status, raw[:300], answer[:500])
    if status < 400:
        return
    reply = json.loads(answer)
    errors: list[BaseException] = []
    for dialect in shapes(p, raw):
        try:
            field = named(reply, dialect)
        except (KeyError, TypeError, AssertionError, IndexError) as exc:
            errors.append(exc)
            continue
        if status in (400, 422) and given_fields and "not valid JSON" not in message(reply):
            root = (field or "").split(".")[0].split("[")[0]
            # A given key may itself hold a dot or a bracket (SGP's envelope splits the name on dots).
            said = " ".join(texts(reply))
            # quoted, or Anthropic's way: its messages open with the field ("top_p: ...")
            quoted = any(f"'{k}" in said or said.startswith(f"{k}:") for k in given_fields)
            assert field in given_fields or root in given_fields or quoted, (field, sorted(given_fields), reply)
        return
    raise AssertionError(f"not in the envelope of {shapes(p, raw)}: {reply}") from errors[0]


def exchange(url: str, p: Path, raw: bytes) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=ANSWER_TIMEOUT)
    try:
        conn.request("POST", p.path, body=raw, headers=p.headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture
async def gw(gateway: GatewayFactory, upstream: Any) -> AsyncIterator[Any]:
    server = await upstream("openai")
    async with scripted_upstream() as embedder:  # an embedding model's upstream
        embedding = {"name": "e", "kind": "embedding", "targets": [scripted_target(embedder)]}
        models = [
            {"name": "m", "targets": [target(server, "vllm")]},
            {"name": "o", "targets": [target(server, "openai")]},
        ]
        yield await gateway(config([*models, embedding]))


@pytest.mark.parametrize("p", PATHS, ids=lambda p: p.path + ("" if p.model == "m" else f"@{p.model}"))
async def test_hostile_bodies_get_bounded_answers_in_the_dialects_envelope(gw: Any, p: Path) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=timedelta(seconds=ANSWER_TIMEOUT),
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=bodies(p))
    @example(case={"prompt": ""})  # vLLM refuses it naming the field in its message; SGP's envelope lost it
    def fuzz(case: dict[str, JSON] | bytes) -> None:
        raw = case if isinstance(case, bytes) else encode(base(p) | case)
        given_fields = frozenset[str]() if isinstance(case, bytes) else frozenset(case)
        status, answer = exchange(gw.url, p, raw)
        check(p, raw, given_fields, status, answer)

    await asyncio.to_thread(fuzz)


def rich(p: Path) -> dict[str, JSON]:
    """A valid body with every nested structure its dialect has (content parts, tools, tool calls and
    results): the fields the top-level fuzzing above never reaches inside."""
    if p.path.startswith("/v1/messages"):  # no thinking: the fake behind "m" is no reasoning model
        drop = {"thinking", "output_config"} | ({"max_tokens", "metadata"} if "count_tokens" in p.path else set())
        body = {k: v for k, v in rich_bodies.MESSAGES.items() if k not in drop}
    elif p.path in ("/v1/responses", "/v1/embeddings"):
        body = rich_bodies.RESPONSE if p.path == "/v1/responses" else rich_bodies.EMBEDDING
    else:
        body = rich_bodies.CHAT if p.chat else rich_bodies.COMPLETION
    return body | ({"model": p.model} if p.model != "m" else {})


@pytest.mark.parametrize("p", PATHS, ids=lambda p: p.path + ("" if p.model == "m" else f"@{p.model}"))
async def test_hostile_values_at_any_depth_get_bounded_answers_in_the_dialects_envelope(gw: Any, p: Path) -> None:
    """A list or an object as a content part's ``type`` was a 500 on every chat path, and as
    ``output_config.effort`` or a tool output part's ``type`` on Anthropic's and Responses' (found by
    nested mutation); an error names the top-level field the hostile value is under."""

    @settings(
        max_examples=EXAMPLES,
        deadline=timedelta(seconds=ANSWER_TIMEOUT),
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=rich_bodies.mutations(rich(p)))
    def fuzz(case: tuple[tuple[tuple[str | int, ...], ...], dict[str, JSON]]) -> None:
        at, body = case
        raw = encode(body)
        status, answer = exchange(gw.url, p, raw)
        check(p, raw, frozenset(str(path[0]) for path in at), status, answer)

    await asyncio.to_thread(fuzz)

"""Raw HTTP clients for each ingress dialect, as its SDK would send, and readers of its answers —
for tests that need exact bytes (the SDK tier runs the real SDKs separately)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.dialects.refusals import parts_of, written

JSON = Any
KEY = "gw-key-0123456789"


async def body_of(resp: aiohttp.ClientResponse) -> tuple[bytes, bool]:
    """An answer's bytes as they came, and whether its body ended unfinished: a stream that failed
    ends so for the SDKs that would miss its in-band error (``StreamEncoder.cut_after_error``)."""
    got: list[bytes] = []
    try:
        async for data in resp.content.iter_any():
            got.append(data)
    except aiohttp.ClientPayloadError:
        return b"".join(got), True
    return b"".join(got), False


@dataclass
class Answer:
    status: int
    text: str
    finish: str | None
    usage: JSON
    raw: bytes
    body: JSON = None
    done: bool = False


@dataclass(frozen=True)
class Ingress:
    name: str
    path: str
    headers: dict[str, str]
    extra: dict[str, JSON]
    done: bool = True  # streams end with [DONE]

    def request(self, model: str, prompt: str, stream: bool, **fields: JSON) -> tuple[str, dict[str, str], JSON]:
        body: dict[str, JSON] = {"model": model, "prompt": prompt, "max_tokens": 4, **self.extra, **fields}
        body["stream"] = stream
        if stream and self.name in ("openai", "friendli", "octoai", "sgp5"):
            body["stream_options"] = {"include_usage": True}
        return self.path, {"Content-Type": "application/json", **self.headers}, body


BEARER = {"Authorization": f"Bearer {KEY}"}
INGRESSES = [
    Ingress("openai", "/v1/completions", BEARER, {}),
    Ingress("friendli", "/serverless/v1/completions", {**BEARER, "X-Friendli-Team": "team1"}, {}),
    Ingress(
        "friendli2024",
        "/v1/completions",
        {**BEARER, "X-Friendli-Team": "team1"},
        {"timeout_microseconds": None, "num_beams": None, "tokens": None, "seed": None},
    ),
    Ingress("sgp", "/v4/beta/completions", {"x-api-key": KEY, "x-selected-account-id": "team1"}, {}, done=False),
    Ingress("sgp5", "/v5/completions", {"x-api-key": KEY, "x-selected-account-id": "team1"}, {}, done=False),
    Ingress("octoai", "/v1/completions", {**BEARER, "X-Fern-SDK-Name": "octoai"}, {}),
]
BY_NAME = {i.name: i for i in INGRESSES}


def frames(raw: bytes) -> list[str]:
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line for line in block.decode().split("\n") if line]
        assert all(line.startswith(("data: ", "event: ")) for line in lines), lines
        out += [line[6:] for line in lines if line.startswith("data: ")]
    return out


def read(ingress: Ingress, status: int, raw: bytes, stream: bool) -> Answer:
    if status != 200 or not stream:
        body = json.loads(raw)
        if status != 200:
            return Answer(status, "", None, None, raw, body)
        choice = body["choices"][0]
        return Answer(status, choice["text"], choice.get("finish_reason"), body.get("usage"), raw, body)
    datas = frames(raw)
    done = bool(datas) and datas[-1] == "[DONE]"
    chunks = [json.loads(d) for d in datas if d != "[DONE]"]
    if ingress.name == "friendli2024":
        text = "".join(c["text"] for c in chunks if c.get("event") == "token_sampled")
        complete = chunks[-1]
        assert complete["event"] == "complete", complete
        choice = complete["choices"][0]
        assert choice["text"] == text
        return Answer(status, text, choice.get("finish_reason"), complete.get("usage"), raw, chunks, done)
    text, finish, usage = "", None, None
    for c in chunks:
        if "error" in c or c.get("object") == "error":
            return Answer(status, text, "error", None, raw, c, done)
        for ch in c.get("choices", []):
            text += ch.get("text", "")
            finish = ch.get("finish_reason") or finish
        usage = c.get("usage") or usage
    return Answer(status, text, finish, usage, raw, chunks, done)


def without_team(ingress: Ingress) -> Ingress:
    """The same client with no team header: its key's first team is used."""
    teams = ("x-friendli-team", "x-selected-account-id", "openai-organization")
    headers = {k: v for k, v in ingress.headers.items() if k.lower() not in teams}
    return Ingress(ingress.name, ingress.path, headers, ingress.extra, ingress.done)


@dataclass(frozen=True)
class ChatIngress(Ingress):
    """A chat client: OpenAI's chat completions, or Anthropic's Messages."""

    def request(self, model: str, prompt: str, stream: bool, **fields: JSON) -> tuple[str, dict[str, str], JSON]:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], **fields, "stream": stream}
        if stream and self.name == "openai-chat":
            body["stream_options"] = {"include_usage": True}
        return self.path, {"Content-Type": "application/json", **self.headers}, body


@dataclass(frozen=True)
class ResponsesIngress(Ingress):
    """OpenAI's Responses: ``input`` for the prompt, ``max_output_tokens`` for the length."""

    def request(self, model: str, prompt: str, stream: bool, **fields: JSON) -> tuple[str, dict[str, str], JSON]:
        if "max_tokens" in fields:
            fields["max_output_tokens"] = fields.pop("max_tokens")
        body = {"model": model, "input": prompt, "store": False, **fields, "stream": stream}
        return self.path, {"Content-Type": "application/json", **self.headers}, body


# Every ingress dialect that streams, as its client sends: completions (four vendors' and two API
# versions), chat, Anthropic's Messages and OpenAI's Responses.
STREAMING = [
    *INGRESSES,
    ChatIngress("openai-chat", "/v1/chat/completions", BEARER, {}),
    ChatIngress("anthropic", "/v1/messages", {"x-api-key": KEY, "anthropic-version": "2023-06-01"}, {}),
    ResponsesIngress("responses", "/v1/responses", BEARER, {}, done=False),
]


def pieces(chunk: JSON) -> list[str]:
    """The answer's text pieces one streamed event carries, in any dialect."""
    kind = chunk.get("type")  # Anthropic's and Responses' named events
    if kind == "content_block_delta":
        return [chunk["delta"].get("text") or ""]
    if kind == "response.output_text.delta":
        return [chunk["delta"]]
    if chunk.get("event") == "token_sampled":  # Friendli's 2024 API; its "complete" repeats the text
        return [chunk["text"]]
    if chunk.get("event") == "complete":
        return []
    return [c.get("text") or (c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or ()]


ENDINGS = {"message_stop", "response.completed", "response.incomplete"}  # a named event ends the stream


@dataclass
class Reading:
    """What a client made of an answer."""

    complete: bool  # a normal finish, and the terminator where the dialect has one
    error: bool
    text: str
    usage: JSON
    finishes: int = 0  # finish signals seen: one in a whole answer


def read_stream(ingress: Ingress, raw: bytes) -> Reading:
    """A streamed answer as its client reads it: complete only with a normal finish (and the
    terminator where the dialect has one), never past an error."""
    text, finishes, error, done, usage = "", 0, False, False, None
    for data in frames(raw):
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        kind = chunk.get("type")
        if "error" in chunk or chunk.get("object") == "error" or "error" in (chunk.get("event"), kind):
            error = True
        error = error or kind == "response.failed"
        text += "".join(pieces(chunk))
        if kind == "message_delta":
            finishes, usage = finishes + bool(chunk["delta"].get("stop_reason")), chunk.get("usage")
        elif kind in ENDINGS:
            done = True
            if kind != "message_stop":
                finishes, usage = finishes + 1, chunk["response"].get("usage")
        if chunk.get("event") == "complete":
            finishes, usage = finishes + 1, chunk.get("usage")
            continue
        finishes += sum(1 for c in chunk.get("choices") or () if c.get("finish_reason"))
        usage = chunk.get("usage") or usage
    complete = finishes > 0 and not error and (done or not ingress.done)
    return Reading(complete, error, text, usage, finishes)


def read_whole(status: int, raw: bytes) -> Reading:
    """A whole answer in any dialect; any status but 200 is the error."""
    if status != 200:
        return Reading(False, True, "", None)
    body = json.loads(raw)
    if body.get("object") == "response":
        parts = [c for item in body.get("output") or () for c in item.get("content") or ()]
        text = "".join(c.get("text") or "" for c in parts)
        complete = body.get("status") in ("completed", "incomplete")
        return Reading(complete, False, text, body.get("usage"), int(complete))
    if "content" in body:  # Anthropic's message
        text = "".join(b.get("text") or "" for b in body["content"])
        stopped = bool(body.get("stop_reason"))
        return Reading(stopped, False, text, body.get("usage"), int(stopped))
    choice = body["choices"][0]
    text = choice.get("text") or (choice.get("message") or {}).get("content") or ""
    finished = bool(choice.get("finish_reason"))
    return Reading(finished, False, text, body.get("usage"), int(finished))


def completion_tokens(usage: JSON) -> int | None:
    """The completion's token count in any dialect's usage."""
    if not usage:
        return None
    for name in ("completion_tokens", "output_tokens"):
        if name in usage:
            return int(usage[name])
    return None


def openai(body: JSON) -> str:
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    message: str = body["error"]["message"]
    return message


def anthropic(body: JSON) -> str:
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"}, body
    message: str = body["error"]["message"]
    return message


def friendli(body: JSON) -> str:
    """Friendli's: its top-level ``message`` (third-party clients read it) over OpenAI's ``error``."""
    assert set(body) == {"message", "error"} and body["message"] == body["error"]["message"], body
    message: str = body["message"]
    return message


def sgp(body: JSON, quoted: bool = True) -> str:
    """FastAPI's ``detail``: a string (the field an error names beside it, ``param``), or a 422's
    list of ``{loc, msg, type}`` whose message quotes the field (``quoted``)."""
    detail = body["detail"]
    if isinstance(detail, str):
        assert set(body) <= {"detail", "param"}, body
        return detail
    assert set(body) == {"detail"}, body
    for d in detail:  # FastAPI's: the field's path from "body" on, a list's index as a number
        assert set(d) == {"loc", "msg", "type"} and d["loc"][0] == "body", body
        field = written(d["loc"][1:])  # "" where the body as a whole is refused
        assert d["loc"] == ["body", *parts_of(field)] and (not quoted or not field or f"'{field}" in d["msg"]), body
    return " ".join(d["msg"] for d in detail)


def octoai(body: JSON) -> str:
    assert body.get("object") == "error", body
    assert set(body) == {"object", "type", "message", "code", "param", "validation_errors"}, body
    message: str = body["message"]
    return message


# each dialect's error envelope, checked whole: its message
ENVELOPES: dict[str, Callable[[JSON], str]] = {
    "openai": openai,
    "anthropic": anthropic,
    "friendli": friendli,
    "sgp": sgp,
    "octoai": octoai,
}

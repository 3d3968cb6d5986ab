"""Internal answers → OpenAI-shaped JSON bodies, stream chunks and error envelopes.

Friendli (current), Scale SGP and OctoAI answer in OpenAI's shape with small differences: whether
``[DONE]`` ends a stream, where usage goes, which logprob shape, which extra per-choice fields, which
finish reasons. Each difference is one field of ``Style``; each dialect declares its style next to
its codec, so the shape is written once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_core import to_json

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.core.response import (
    Choice,
    Completion,
    Delta,
    Finish,
    Frame,
    Shape,
    StreamEvent,
    StreamStart,
    Token,
    Usage,
    UsageReport,
)
from gateway.dialects.base import ErrorReply, retry_headers
from gateway.dialects.common import DONE, chat_logprobs, legacy_logprobs, sse, usage_json
from gateway.dialects.openai.relay import FINGERPRINT, Retouch, removal, without_key

JSON = Any

ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
# Where OpenAI's type is not its status's: an unknown model is ``invalid_request_error`` with code
# ``model_not_found`` (its API's answer to a chat or ``GET /v1/models/{model}`` for one; openai 3.57.0
# raises it as NotFoundError, by status).
CODE_TYPES: Mapping[str, str] = {"model_not_found": "invalid_request_error"}


def error_object(err: GatewayError, status: int | None = None) -> dict[str, JSON]:
    status = status or err.status
    kind = CODE_TYPES.get(err.code) or ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"message": err.message, "type": kind, "param": err.param, "code": err.code}


def openai_error(err: GatewayError) -> ErrorReply:
    return ErrorReply(err.status, {"error": error_object(err)}, retry_headers(err))


@dataclass(frozen=True, slots=True)
class Style:
    done: bool = True
    fingerprint: str | None = None  # None: field omitted when the answer has none
    usage_on_last_chunk: bool = False
    usage_always: bool = False
    usage_details: bool = False
    logprobs: Literal["legacy", "chat"] = "legacy"
    token_ids: bool = False  # Friendli: choices[].tokens, stream choices[].token
    seed: bool = False  # Friendli: choices[].seed
    created: bool = True
    finish: Mapping[str, str] = field(default_factory=dict)
    stream_error: Callable[[GatewayError], JSON] = lambda err: {"error": error_object(err)}
    cut_after_error: bool = False  # ``StreamEncoder.cut_after_error``

    def finish_reason(self, reason: str | None) -> str | None:
        if reason is None:
            return None
        return self.finish.get(reason, reason)


STAND_IN = b"\x00"  # a text no JSON holds unescaped (``ChunkEncoder._shaped``)
OPENAI_FINISH = {"abort": "stop", "tool_calls": "tool_calls"}
OPENAI_STYLE = Style(fingerprint="", finish=OPENAI_FINISH)


def _logprobs(style: Style, choice: Choice, operation: Operation) -> JSON:
    if choice.logprobs is None:
        return None
    if style.logprobs == "chat" or operation is Operation.CHAT:
        return chat_logprobs(choice.logprobs)
    return legacy_logprobs(choice.logprobs)[0]


def _choice(style: Style, req: InternalRequest, c: Choice) -> dict[str, JSON]:
    out: dict[str, JSON] = {"index": c.index}
    if req.operation is Operation.CHAT:
        msg: dict[str, JSON] = {"role": c.role or "assistant", "content": c.text}
        if c.tool_calls:
            msg["tool_calls"] = c.tool_calls
        if c.reasoning is not None:
            msg["reasoning_content"] = c.reasoning
        out["message"] = msg
    else:
        out["text"] = c.text
    out["finish_reason"] = style.finish_reason(c.finish_reason) or "stop"
    out["logprobs"] = _logprobs(style, c, req.operation)
    if style.seed:
        out["seed"] = c.seed if c.seed is not None else 0
    if style.token_ids or (req.want_token_ids and c.token_ids is not None):
        out["tokens" if style.token_ids else "token_ids"] = c.token_ids or []
    return out


def render(style: Style, req: InternalRequest, c: Completion) -> dict[str, JSON]:
    chat = req.operation is Operation.CHAT
    out: dict[str, JSON] = {"id": c.id, "object": "chat.completion" if chat else "text_completion"}
    if style.created:
        out["created"] = c.created
    out["model"] = c.model
    if style.fingerprint is not None:
        out["system_fingerprint"] = c.system_fingerprint or style.fingerprint or None
    out["choices"] = [_choice(style, req, ch) for ch in c.choices]
    out["usage"] = usage_json(c.usage or Usage(), style.usage_details)
    return out


def retouch_for(
    style: Style, start: StreamStart, want_usage: bool, chat: bool, want_ids: bool = True
) -> Retouch | None:
    """What relayed chunks of the upstream that began with ``start`` need to be in ``style``: what
    the decoded path would write (it writes the first chunk's identity on every chunk); None: they are
    written as they came."""
    drops: tuple[tuple[bytes, bytes], ...] = ()
    fingerprint, head, kept = None, b"", b""
    if style.fingerprint is None or style.fingerprint:  # the style decides the fingerprint
        fingerprint = removal(b"system_fingerprint", to_json(start.system_fingerprint))
    if style.fingerprint:  # the first chunk's, else the style's own
        head = FINGERPRINT + to_json(start.system_fingerprint or style.fingerprint) + b","
        kept = head[:-1] if start.system_fingerprint else b""
    if not want_usage or style.usage_on_last_chunk:
        drops = (without_key(b"usage", b"null"),)
    token_ids = style.token_ids and start.token_ids
    # ids the upstream was asked for only for the gateway's own use (a stream that may resume)
    hide_ids = start.token_ids and not want_ids
    if not (drops or fingerprint or token_ids or chat or hide_ids):
        return None
    return Retouch(drops, head, token_ids, fingerprint, kept, reasoning=chat, hide_ids=hide_ids)


class ChunkEncoder:
    """OpenAI-shaped stream chunks. Keeps per-choice logprob text offsets and, for dialects that put
    usage on the last chunk (OctoAI, seed 003), holds each finish chunk back until it is known whether
    usage follows (it always follows the finishes); content goes out as it comes. Relayed frames (the
    upstream's OpenAI chunks) are retouched into the style in bytes."""

    continuable = True  # its events go on after any of its own or relayed ones (``StreamEncoder``)

    def __init__(self, style: Style, req: InternalRequest) -> None:
        self.style = style
        self.cut_after_error = style.cut_after_error
        self.chat = req.operation is Operation.CHAT
        self.want_usage = req.stream_usage or style.usage_always
        self.want_ids = style.token_ids or req.want_token_ids
        self.head: dict[str, JSON] = {}
        self.offsets: dict[int, int] = {}
        self.held: dict[str, JSON] | None = None  # a finish chunk that usage may still join
        self.retouch: Retouch | None = None
        # A ``Token`` (an event of the last shaped frame's shape): written as it came (``as_is``), or
        # its text between the retouched head and tail (``around``), or retouched whole.
        self.as_is = True
        self.around: tuple[bytes, int, int | None, bytes] | None = None
        self.sent_role: set[int] = set()
        self.relayed = False  # relayed frames carried the upstream's own roles
        # The frame around one chunk's choices, encoded once per stream: a chunk costs the encoding of
        # its choice, not a copy and re-encoding of the head.
        self.null_usage = self.want_usage and not style.usage_on_last_chunk
        self.prefix = b'data: {"choices":['
        self.suffix = b"]" + (b',"usage":null' if self.null_usage else b"") + b"}\n\n"

    def _chunk(self, choices: list[dict[str, JSON]]) -> dict[str, JSON]:
        out = dict(self.head)
        out["choices"] = choices
        if self.null_usage:
            out["usage"] = None
        return out

    def _release(self) -> bytes:
        held, self.held = self.held, None
        return sse(held) if held is not None else b""

    def _delta(self, ev: Delta) -> dict[str, JSON]:
        choice: dict[str, JSON] = {"index": ev.index}
        if self.chat:
            delta: dict[str, JSON] = {}
            if ev.index not in self.sent_role and not self.relayed:
                self.sent_role.add(ev.index)
                delta["role"] = ev.role or "assistant"
            if ev.text or not ev.tool_calls:
                delta["content"] = ev.text
            if ev.tool_calls:
                delta["tool_calls"] = list(ev.tool_calls)
            if ev.reasoning:
                delta["reasoning_content"] = ev.reasoning
            choice["delta"] = delta
            choice["logprobs"] = chat_logprobs(ev.logprobs) if ev.logprobs else None
        else:
            choice["text"] = ev.text
            if ev.logprobs:
                if self.style.logprobs == "chat":
                    choice["logprobs"] = chat_logprobs(ev.logprobs)
                else:
                    lp, self.offsets[ev.index] = legacy_logprobs(ev.logprobs, self.offsets.get(ev.index, 0))
                    choice["logprobs"] = lp
            else:
                choice["logprobs"] = None
        choice["finish_reason"] = None
        if self.want_ids and ev.token_ids:
            if self.style.token_ids:
                choice["token"] = ev.token_ids[-1]
            else:
                choice["token_ids"] = list(ev.token_ids)
        return choice

    def _one(self, choice: dict[str, JSON]) -> bytes:
        out = self.prefix + to_json(choice) + self.suffix
        return out if self.held is None else self._release() + out

    def event(self, ev: StreamEvent) -> bytes:
        if type(ev) is Token:  # most events of a relayed stream (handled here, not in a call)
            data = ev.data
            if not self.as_is:
                around = self.around
                if around is None:
                    data = self.retouch(data)  # type: ignore[misc]  # (as_is is only False with a retouch)
                else:
                    head, start, tail_size, tail = around
                    # (a shape that holds ids has its tail after them: the plain text ends at a quote)
                    end = len(data) - tail_size if tail_size is not None else data.find(b'"', start)
                    data = head + data[start:end] + tail if head else data[:end] + tail
            return data if self.held is None else self._release() + data
        if isinstance(ev, Frame):
            self.relayed = True
            if ev.shape is not None:
                self._shaped(ev.shape)
            frame = ev if self.retouch is None else self.retouch(ev)
            return frame if self.held is None else self._release() + frame
        if isinstance(ev, Delta):
            return self._one(self._delta(ev))
        if isinstance(ev, Finish):
            last: dict[str, JSON] = {"index": ev.index}
            if self.chat:
                last["delta"] = {}
            else:
                last["text"] = ""
            last["logprobs"] = None
            last["finish_reason"] = self.style.finish_reason(ev.reason)
            if self.style.usage_on_last_chunk:
                out = self._release()
                self.held = self._chunk([last])
                return out
            return self._one(last)
        if isinstance(ev, UsageReport):
            if not self.want_usage:
                return b""
            usage = usage_json(ev.usage, self.style.usage_details)
            if self.style.usage_on_last_chunk:
                if self.held is None:
                    self.held = self._chunk([])
                self.held["usage"] = usage
                return b""
            chunk = dict(self.head)
            chunk["choices"] = []
            chunk["usage"] = usage
            return sse(chunk)
        assert isinstance(ev, StreamStart)  # what is left once Tokens and frames went first
        self._start(ev)
        return b""

    def _start(self, ev: StreamStart) -> None:
        head: dict[str, JSON] = {
            "id": ev.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": ev.created,
            "model": ev.model,
        }
        if self.style.fingerprint is not None:
            head["system_fingerprint"] = ev.system_fingerprint or self.style.fingerprint or None
        self.head = head
        self.prefix = b"data: " + to_json(head)[:-1] + b',"choices":['
        self.retouch = retouch_for(self.style, ev, self.want_usage, self.chat, self.want_ids)

    def _shaped(self, shape: Shape) -> None:
        """How the Tokens of ``shape`` (head, tail) are retouched: as the head and tail alone are. The
        retouch looks only for keys, quoted, and the shape's text is plain and closed as a JSON value:
        no match can take in a byte of it (``chunks.shape``), so the head and tail are retouched around
        a stand-in text (a NUL byte, which JSON escapes), and the text put back in its place. A shape
        (head, mid, tail) around a text and ids is retouched so only where the ids do not show."""
        retouch = self.retouch
        self.as_is, self.around = True, None
        if retouch is None:
            return
        head, tail = shape[0], shape[1] if len(shape) == 2 else b"0".join(shape[1:])  # (a stand-in id)
        parts = retouch(head + STAND_IN + tail).split(STAND_IN)
        self.as_is = parts == [head, tail]
        if len(parts) != 2 or self.as_is:
            return
        kept = b"" if parts[0] == head else parts[0]  # (a head as it came is not copied apart)
        if len(shape) == 2:
            self.around = (kept, len(head), len(tail), parts[1])
        elif retouch(head + STAND_IN + b"1".join(shape[1:])).split(STAND_IN) == parts:  # the ids do not show
            self.around = (kept, len(head), None, parts[1])

    def end(self) -> bytes:
        out = self._release()
        return out + DONE if self.style.done else out

    def error(self, err: GatewayError) -> bytes:
        return self._release() + sse(self.style.stream_error(err))


def model_card(name: str, created: int) -> dict[str, JSON]:
    """One model as OpenAI's ``GET /v1/models/{model}`` answers it (and its list, each entry)."""
    return {"id": name, "object": "model", "created": created, "owned_by": "llm-gateway"}


def model_list(names: Sequence[str], created: int) -> dict[str, JSON]:
    return {"object": "list", "data": [model_card(n, created) for n in names]}


class ModelShapes:
    """OpenAI's list is every name the caller may use, aliases too, unpaged; a card echoes the name
    asked for."""

    def listing(
        self, names: Sequence[str], canonical: Callable[[str], str], now: int, query: Iterable[tuple[str, str]]
    ) -> dict[str, JSON]:
        return model_list(names, now)

    def card(self, name: str, canonical: Callable[[str], str], now: int) -> dict[str, JSON]:
        return model_card(name, now)


MODEL_SHAPES = ModelShapes()

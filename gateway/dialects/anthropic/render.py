"""Internal answers → Anthropic's Messages answers: a whole ``message``, the named-event stream, and the
error envelope.

An Anthropic target's answer to an Anthropic client comes as the upstream wrote it: a whole message
as it is (``Completion.raw``), a stream as frames written unchanged; the encoder only tracks the
relayed blocks, so that what a later target adds (a stream resumed on another target, with the
partial text as its prefill: ``routing/resume.py``) goes on in the open text block, or numbers on
from the relayed ones. An OpenAI-wire target's chunks come relayed too, and a text delta in
the stream's usual shape is written with its text bytes put in as they came (``chunks``).

The stream is the sequence the Anthropic SDK's accumulator expects (``lib/streaming/_messages.py``):
``message_start``, a ``ping``, then per content block ``content_block_start`` / ``_delta`` (``text_delta``,
``input_json_delta``, ``thinking_delta``) / ``_stop``, one block open at a time, then ``message_delta``
(stop reason, stop sequence, usage) and ``message_stop``; an error after the first byte is an ``error``
event. Input tokens are known only when the upstream reports usage at the end: ``message_start``
carries 0 and ``message_delta`` the real figures (its usage fields are cumulative, and the SDK takes
each one it is given).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic_core

from gateway.core.errors import GatewayError, UpstreamMalformed
from gateway.core.request import InternalRequest
from gateway.core.response import (
    Choice,
    Completion,
    Delta,
    Finish,
    Frame,
    StreamEvent,
    StreamStart,
    Token,
    Usage,
    UsageReport,
)
from gateway.dialects.anthropic.chunks import TEXT_END, ChunkText, events, text_event, text_head
from gateway.dialects.base import ErrorReply, retry_headers
from gateway.dialects.common import new_id

JSON = Any

# Anthropic's error types by status (its "Errors" page); 503 and its own 529 are ``overloaded_error``.
ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_object(err: GatewayError) -> dict[str, JSON]:
    kind = ERROR_TYPES.get(err.status, "invalid_request_error" if err.status < 500 else "api_error")
    message, param = err.message, err.param
    # no field of its own for the parameter at fault: the message names it, as Anthropic's own do
    if param and not message.startswith(f"{param}:") and f"'{param}" not in message:
        message = f"{param}: {message}"
    return {"type": "error", "error": {"type": kind, "message": message}}


# Anthropic answers "overloaded" with its own 529, which its SDKs raise as ``OverloadedError`` and retry.
OVERLOADED = 529


def anthropic_error(err: GatewayError) -> ErrorReply:
    status = OVERLOADED if err.status == 503 else err.status
    return ErrorReply(status, error_object(err), retry_headers(err))


def stop_reason(choice_reason: str | None, stop_sequence: str | None) -> str:
    if choice_reason == "length":
        return "max_tokens"
    if choice_reason == "tool_calls":
        return "tool_use"
    if choice_reason == "content_filter":
        return "refusal"
    return "stop_sequence" if stop_sequence is not None else "end_turn"


def usage_json(usage: Usage | None) -> dict[str, JSON]:
    """Anthropic counts cache reads and writes apart from ``input_tokens``; only Anthropic targets report
    cache writes."""
    u = usage or Usage()
    cached, written = u.cached_tokens or 0, u.cache_write_tokens or 0
    return {
        "input_tokens": max(0, u.prompt_tokens - cached - written),
        "output_tokens": u.completion_tokens,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
    }


def tool_input(arguments: str) -> JSON:
    try:
        value = pydantic_core.from_json(arguments or "{}")
    except ValueError:
        raise UpstreamMalformed("upstream tool call arguments are not JSON") from None
    if not isinstance(value, dict):
        raise UpstreamMalformed("upstream tool call arguments are not a JSON object")
    return value


def tool_block(call: JSON) -> dict[str, JSON]:
    fn = call.get("function") or {}
    return {
        "type": "tool_use",
        "id": call.get("id") or new_id("toolu"),  # the client's tool_result names it: never empty
        "name": fn.get("name") or "",
        "input": tool_input(fn.get("arguments") or ""),
    }


def content(choice: Choice) -> list[dict[str, JSON]]:
    blocks: list[dict[str, JSON]] = []
    if choice.reasoning:
        blocks.append({"type": "thinking", "thinking": choice.reasoning, "signature": ""})
    if choice.text or not choice.tool_calls:
        blocks.append({"type": "text", "text": choice.text})
    blocks += [tool_block(call) for call in choice.tool_calls or ()]
    return blocks


def render(req: InternalRequest, c: Completion) -> dict[str, JSON]:
    if isinstance(c.raw, dict) and c.raw.get("type") == "message":  # an Anthropic target's own message
        return c.raw
    choice = c.choices[0] if c.choices else Choice(index=0)
    return {
        "id": c.id,
        "type": "message",
        "role": "assistant",
        "model": c.model,
        "content": content(choice),
        "stop_reason": stop_reason(choice.finish_reason, choice.stop_sequence),
        "stop_sequence": choice.stop_sequence,
        "usage": usage_json(c.usage),
    }


def event(name: str, data: JSON) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + pydantic_core.to_json(data) + b"\n\n"


PING = event("ping", {"type": "ping"})
TEXT_BLOCK = b'"content_block":{"type":"text"'  # a relayed content_block_start's, as to_json writes it
BLOCK_START, BLOCK_STOP = b"event: content_block_start\n", b"event: content_block_stop\n"


class MessagesEncoder:
    """Internal stream events → Anthropic's named events. Holds which block is open (text, tool use or
    thinking; the upstream's tool-call index for a tool) so a change of kind closes it and opens the next."""

    continuable = True  # its events go on after any of its own or relayed ones (``StreamEncoder``)
    cut_after_error = False  # the Anthropic SDKs raise on the ``error`` event

    def __init__(self, req: InternalRequest) -> None:
        self.index = -1  # the open block's index; -1: none yet
        self.open: tuple[str, int] | None = None  # ("text" | "thinking" | "tool", upstream tool index)
        self.reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage: Usage | None = None
        self.started = False
        self.pending: StreamStart | None = None  # held: the upstream's own message_start may follow
        self.native = req.native is not None and req.native_dialect == "anthropic"
        self.relayed = b""  # the last relayed event's name
        self.text_head: bytes | None = None  # the open text block's delta event, up to its text
        self.chunk_text: ChunkText | None = None  # OpenAI-shaped chunks relayed (``chunks``), once any came

    def _block(self, kind: str, tool: int, start: JSON) -> bytes:
        out = self._close()
        self.index += 1
        self.open = (kind, tool)
        self.text_head = text_head(self.index) if kind == "text" else None
        return out + event(
            "content_block_start", {"type": "content_block_start", "index": self.index, "content_block": start}
        )

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = self.text_head = None
        return event("content_block_stop", {"type": "content_block_stop", "index": self.index})

    def _delta(self, delta: JSON) -> bytes:
        return event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def _tool(self, call: JSON) -> bytes:
        fn = call.get("function") or {}
        tool = int(call.get("index", 0))
        out = b""
        if self.open != ("tool", tool) or call.get("id"):
            start: JSON = {
                "type": "tool_use",
                "id": call.get("id") or new_id("toolu"),
                "name": fn.get("name") or "",
                "input": {},
            }
            out = self._block("tool", tool, start)
        if fn.get("arguments"):
            out += self._delta({"type": "input_json_delta", "partial_json": fn["arguments"]})
        return out

    def _content(self, ev: Delta) -> bytes:
        out = b""
        if ev.reasoning:
            if self.open is None or self.open[0] != "thinking":
                out += self._block("thinking", 0, {"type": "thinking", "thinking": "", "signature": ""})
            out += self._delta({"type": "thinking_delta", "thinking": ev.reasoning})
        if ev.text:
            if self.text_head is None:
                out += self._block("text", 0, {"type": "text", "text": ""})
            out += text_event(self.text_head, ev.text)  # type: ignore[arg-type]  # (set by the block)
        for call in ev.tool_calls:
            out += self._tool(call)
        return out

    def _start(self, ev: StreamStart) -> bytes:
        self.started = True
        message: JSON = {
            "id": ev.id,
            "type": "message",
            "role": "assistant",
            "model": ev.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return event("message_start", {"type": "message_start", "message": message}) + PING

    def _relay(self, frame: bytes) -> bytes:
        """An Anthropic target's own events as they came, one or a run of them: the blocks they open
        counted, the last one's kind kept (a stream resumed mid-text goes on in its block), the last
        event's name kept (``end``). An event's line cannot occur inside a JSON line: no raw newline."""
        self.pending, self.started = None, True
        start, stop = frame.rfind(BLOCK_START), frame.rfind(BLOCK_STOP)
        if start >= 0:
            self.index += frame.count(BLOCK_START)
        if start > stop:  # the last block opened is still open
            text = frame.find(TEXT_BLOCK, start, frame.find(b"\n\n", start)) >= 0
            self.open = ("text", 0) if text else ("relayed", -1)
            self.text_head = text_head(self.index) if text else None
        elif stop >= 0:
            self.open = self.text_head = None
        last = frame.rfind(b"\n\nevent: ", 0, len(frame) - 2) + 2  # 1: the frame holds one event
        last = 0 if last == 1 else last
        self.relayed = frame[last + 7 : frame.find(b"\n", last)]  # after "event: "
        return frame

    def _reader(self) -> ChunkText:
        reader = self.chunk_text
        if reader is None:
            reader = self.chunk_text = ChunkText()
        return reader

    def _frame(self, frame: Frame) -> bytes:
        """Relayed OpenAI-shaped chunks: a run of text deltas in the stream's text shape at once, else
        chunk by chunk (the first alone, as it may lend the shape to the rest of its run)."""
        reader, rest, chunks, out = self._reader(), bytes(frame), frame.chunks, b""
        for _ in range(2):
            if self.text_head is not None and (run := reader.texts(rest, chunks, self.text_head)) is not None:
                return out + run
            cut = rest.find(b"\n\n") + 2
            out += self._chunk(rest[:cut])
            rest, chunks = rest[cut:], chunks - 1
            if not rest:
                return out
        return out + b"".join([self._chunk(one) for one in events(rest)])

    def _chunk(self, event: bytes) -> bytes:
        """One relayed OpenAI-shaped chunk: its text into the open text block's event as it came, when
        it has the stream's text shape (``chunks``); else decoded."""
        reader = self._reader()
        head = self.text_head
        if head is not None and (text := reader.text(event)) is not None:
            return head + b'"' + text + TEXT_END if text else b""
        return b"".join([self.event(ev) for ev in reader.decode(event)])

    def event(self, ev: StreamEvent) -> bytes:
        if type(ev) is Token:  # an OpenAI-shaped chunk in the shape of the last relayed frame
            return self._chunk(ev.data)
        if isinstance(ev, bytes):  # a Frame: upstream events as they came
            if ev.startswith(b"data: "):  # an OpenAI-wire target's chunks (``InternalRequest.relay``)
                return self._frame(ev)
            return self._relay(ev)  # an Anthropic target's own events
        if isinstance(ev, StreamStart) and self.native and not self.started:
            self.pending = ev
            return b""
        if self.pending is not None:  # not relayed: the message_start is ours
            start, self.pending = self.pending, None
            return self._start(start) + self.event(ev)
        if isinstance(ev, Delta):
            return self._content(ev) if ev.index == 0 else b""
        return self._account(ev)

    def _account(self, ev: StreamEvent) -> bytes:
        if isinstance(ev, Finish):
            if ev.index == 0:
                self.reason, self.stop_sequence = ev.reason, ev.stop_sequence
            return b""
        if isinstance(ev, UsageReport):
            self.usage = ev.usage
            return b""
        if isinstance(ev, StreamStart):
            return b"" if self.started else self._start(ev)
        raise TypeError(f"unexpected stream event {type(ev).__name__}")

    def end(self) -> bytes:
        if self.relayed in (b"message_stop", b"message_delta"):  # the upstream's own ending went out
            return b"" if self.relayed == b"message_stop" else event("message_stop", {"type": "message_stop"})
        out = self._start(self.pending) if self.pending is not None else b""
        self.pending = None
        out += self._close()
        if self.index < 0:  # an empty answer still has its one (empty) text block
            out += self._block("text", 0, {"type": "text", "text": ""}) + self._close()
        delta = {"stop_reason": stop_reason(self.reason, self.stop_sequence), "stop_sequence": self.stop_sequence}
        out += event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage_json(self.usage)})
        return out + event("message_stop", {"type": "message_stop"})

    def error(self, err: GatewayError) -> bytes:
        return event("error", error_object(err))

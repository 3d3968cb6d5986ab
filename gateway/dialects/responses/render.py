"""Internal answers → OpenAI Responses: the ``response`` object, and its stream of typed events.

The shapes are the openai SDK's (``types/responses``, openai 3.57.0). A stream is re-encoded event by
event as the target's chunks arrive: ``response.created`` and ``response.in_progress`` when the
target's stream starts, an output item opened at its first text (``output_item.added``,
``content_part.added``), each text delta as ``output_text.delta``, a tool call as a ``function_call``
item with its arguments' deltas, every open item closed at the finish, then ``response.completed``
(or ``.incomplete`` when the length ran out, or ``error`` and ``response.failed``) with the whole
response. Each event carries its ``sequence_number``, from 0.

An answer from a target's own ``/v1/responses`` (``egress``) is the upstream's: a whole response
object rendered as it came, a stream's events written as they came (frames); the gateway adds an
event only when the stream breaks (``error``, numbered after the last one relayed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest
from gateway.core.response import Completion, Delta, Finish, FinishReason, StreamEvent, StreamStart, Usage, UsageReport
from gateway.dialects.common import new_id
from gateway.dialects.openai.render import error_object
from gateway.dialects.responses.parse import Turn

JSON = Any
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def usage_object(usage: Usage | None) -> dict[str, JSON]:
    u = usage or Usage()
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens or 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens or 0},
        "total_tokens": u.total_tokens,
    }


def response_object(
    turn: Turn,
    model: str,
    status: str,
    output: list[JSON],
    usage: Usage | None = None,
    reason: FinishReason | None = None,
    error: JSON = None,
) -> dict[str, JSON]:
    incomplete = INCOMPLETE.get(reason or "")
    if status == "completed" and incomplete is not None:
        status = "incomplete"
    out: dict[str, JSON] = {
        "id": turn.id,
        "object": "response",
        "created_at": turn.created_at,
        "status": status,
        "error": error,
        "incomplete_details": {"reason": incomplete} if status == "incomplete" else None,
        "model": model,
        "output": output,
        **turn.echo,
        "usage": usage_object(usage) if status not in ("in_progress", "failed") else None,
    }
    return out


def _text_part(text: str) -> dict[str, JSON]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str, status: str) -> dict[str, JSON]:
    content = [_text_part(text)] if status != "in_progress" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(item_id: str, call: JSON, status: str) -> dict[str, JSON]:
    function = call.get("function") or {}
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call.get("id") or new_id("call"),
        "name": function.get("name") or "",
        "arguments": function.get("arguments") or "",
        "status": status,
    }


def reasoning_item(item_id: str, text: str, status: str) -> dict[str, JSON]:
    content = [{"type": "reasoning_text", "text": text}] if status != "in_progress" else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def merged_calls(calls: Sequence[JSON]) -> list[JSON]:
    """Tool calls as whole calls: a stream's fragments (chat deltas, each with its call's ``index``: an
    answer accumulated from a stream) are joined, their arguments in order; whole calls stay as they are."""
    merged: dict[JSON, JSON] = {}
    for position, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        key = call.get("index", f"whole-{position}")
        function = call.get("function") or {}
        found = merged.get(key)
        if found is None:
            merged[key] = {**call, "function": dict(function)}
            continue
        if call.get("id"):
            found["id"] = call["id"]
        joined = found["function"]
        if function.get("name"):
            joined["name"] = function["name"]
        joined["arguments"] = (joined.get("arguments") or "") + (function.get("arguments") or "")
    return list(merged.values())


def render(request: InternalRequest, completion: Completion) -> dict[str, JSON]:
    turn: Turn = request.reply
    if isinstance(completion.raw, dict):  # the upstream's own response object (``egress``)
        turn.final = completion.raw
        return completion.raw
    choice = completion.choices[0] if completion.choices else None
    output: list[JSON] = []
    reason = choice.finish_reason if choice is not None else None
    status = "incomplete" if reason in INCOMPLETE else "completed"
    if choice is not None:
        if choice.reasoning:
            output.append(reasoning_item(new_id("rs"), choice.reasoning, "completed"))
        if choice.text or not choice.tool_calls:
            output.append(message_item(new_id("msg"), choice.text, status))
        output += [call_item(new_id("fc"), call, "completed") for call in merged_calls(choice.tool_calls or ())]
    turn.final = response_object(turn, completion.model or request.model, "completed", output, completion.usage, reason)
    return turn.final


class _Open:
    """An output item being streamed: its index, its item and the text or arguments so far."""

    __slots__ = ("index", "item", "kind", "text")

    def __init__(self, index: int, item: dict[str, JSON], kind: str) -> None:
        self.index, self.item, self.kind, self.text = index, item, kind, ""


class EventEncoder:
    """Internal stream events → Responses SSE events, in order, each with its sequence number."""

    cut_after_error = False  # the OpenAI SDK raises on the ``error`` event

    def __init__(self, request: InternalRequest) -> None:
        self.turn: Turn = request.reply
        self.model = request.model
        self.seq = 0
        self.started = False
        self.output: list[JSON] = []  # finished items, in output order
        self.text: _Open | None = None
        self.reasoning: _Open | None = None
        self.calls: dict[JSON, _Open] = {}  # by the chat tool call's index
        self.next_index = 0
        self.reason: FinishReason | None = None
        self.usage: Usage | None = None
        self.relayed = False  # the upstream's own events (frames): written as they came

    def _emit(self, kind: str, body: dict[str, JSON]) -> bytes:
        body = {"type": kind, "sequence_number": self.seq, **body}
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + to_json(body) + b"\n\n"

    def _snapshot(self, status: str, error: JSON = None) -> dict[str, JSON]:
        usage = self.usage if status != "in_progress" else None
        return response_object(self.turn, self.model, status, list(self.output), usage, self.reason, error)

    def _start(self) -> bytes:
        self.started = True
        response = self._snapshot("in_progress")
        return self._emit("response.created", {"response": response}) + self._emit(
            "response.in_progress", {"response": response}
        )

    def _open(self, item: dict[str, JSON], kind: str) -> tuple[_Open, bytes]:
        opened = _Open(self.next_index, item, kind)
        self.next_index += 1
        out = self._emit("response.output_item.added", {"output_index": opened.index, "item": item})
        return opened, out

    def _close_text(self) -> bytes:
        text, self.text = self.text, None
        if text is None:
            return b""
        status = "incomplete" if self.reason in INCOMPLETE else "completed"
        item_id, where = text.item["id"], {"item_id": text.item["id"], "output_index": text.index, "content_index": 0}
        done = message_item(item_id, text.text, status)
        self.output.append(done)
        return (
            self._emit("response.output_text.done", {**where, "text": text.text, "logprobs": []})
            + self._emit("response.content_part.done", {**where, "part": _text_part(text.text)})
            + self._emit("response.output_item.done", {"output_index": text.index, "item": done})
        )

    def _close_reasoning(self) -> bytes:
        opened, self.reasoning = self.reasoning, None
        if opened is None:
            return b""
        done = reasoning_item(opened.item["id"], opened.text, "completed")
        self.output.append(done)
        where = {"item_id": opened.item["id"], "output_index": opened.index, "content_index": 0}
        return self._emit("response.reasoning_text.done", {**where, "text": opened.text}) + self._emit(
            "response.output_item.done", {"output_index": opened.index, "item": done}
        )

    def _close_calls(self) -> bytes:
        out = b""
        for opened in self.calls.values():
            item = {**opened.item, "arguments": opened.text, "status": "completed"}
            self.output.append(item)
            where = {"item_id": item["id"], "output_index": opened.index}
            out += self._emit(
                "response.function_call_arguments.done", {**where, "name": item["name"], "arguments": opened.text}
            )
            out += self._emit("response.output_item.done", {"output_index": opened.index, "item": item})
        self.calls = {}
        return out

    def _delta(self, ev: Delta) -> bytes:
        out = b""
        if ev.reasoning:
            if self.reasoning is None:
                self.reasoning, out = self._open(reasoning_item(new_id("rs"), "", "in_progress"), "reasoning")
            r = self.reasoning
            r.text += ev.reasoning
            where = {"item_id": r.item["id"], "output_index": r.index, "content_index": 0}
            out += self._emit("response.reasoning_text.delta", {**where, "delta": ev.reasoning})
        if ev.text:
            out += self._close_reasoning()
            if self.text is None or self.calls:
                out += self._close_calls()
                self.text, added = self._open(message_item(new_id("msg"), "", "in_progress"), "message")
                out += added
                where = {"item_id": self.text.item["id"], "output_index": self.text.index, "content_index": 0}
                out += self._emit("response.content_part.added", {**where, "part": _text_part("")})
            t = self.text
            t.text += ev.text
            where = {"item_id": t.item["id"], "output_index": t.index, "content_index": 0}
            out += self._emit("response.output_text.delta", {**where, "delta": ev.text, "logprobs": []})
        for position, call in enumerate(ev.tool_calls):
            if not isinstance(call, dict):
                continue
            key = call.get("index", position)
            opened = self.calls.get(key)
            if opened is None:
                out += self._close_reasoning() + self._close_text()
                item = call_item(
                    new_id("fc"), {**call, "function": {**(call.get("function") or {}), "arguments": ""}}, "in_progress"
                )
                opened, added = self._open(item, "function_call")
                self.calls[key] = opened
                out += added
            arguments = (call.get("function") or {}).get("arguments") or ""
            if arguments:
                opened.text += arguments
                where = {"item_id": opened.item["id"], "output_index": opened.index}
                out += self._emit("response.function_call_arguments.delta", {**where, "delta": arguments})
        return out

    @property
    def continuable(self) -> bool:
        """Not after the upstream's own events (frames): its response and its open item are the
        upstream's, which this encoder does not hold, so a break there ends with ``error``."""
        return not self.relayed

    def event(self, ev: StreamEvent) -> bytes:
        if isinstance(ev, bytes):  # a frame: one upstream event as it came, its sequence number kept
            self.relayed = self.started = True
            self.seq += 1
            return ev
        if self.relayed or isinstance(ev, StreamStart):
            # What a relayed stream's reader read beside its frames; and a stream's identity, whose
            # events (ours or the upstream's) begin with what follows it. Its model names the answer,
            # as a whole answer's does (``render``); a continuation's does not rename it.
            if isinstance(ev, StreamStart) and ev.model and not self.started:
                self.model = ev.model
            return b""
        out = b"" if self.started else self._start()
        if isinstance(ev, Delta):
            if ev.index == 0:
                out += self._delta(ev)
        elif isinstance(ev, Finish):
            if ev.index == 0:
                self.reason = ev.reason
                out += self._close_reasoning() + self._close_text() + self._close_calls()
        elif isinstance(ev, UsageReport):
            self.usage = ev.usage
        return out

    def end(self) -> bytes:
        if self.relayed:  # the upstream's terminal event went out with its frames
            return b""
        out = b"" if self.started else self._start()
        out += self._close_reasoning() + self._close_text() + self._close_calls()
        final = self._snapshot("completed")
        self.turn.final = final
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return out + self._emit(kind, {"response": final})

    def error(self, err: GatewayError) -> bytes:
        body = error_object(err)
        fields = {"code": body["code"], "message": body["message"], "param": body["param"]}
        if self.relayed:  # the upstream's response is not ours to rewrite: the error event alone
            return self._emit("error", fields)
        out = b"" if self.started else self._start()
        out += self._emit("error", fields)
        failed = self._snapshot("failed", {"code": body["code"] or "server_error", "message": body["message"]})
        return out + self._emit("response.failed", {"response": failed})

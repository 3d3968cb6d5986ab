"""Anthropic's Messages API as an upstream (a ``Wire``): every ingress dialect's request to a Claude model.

The internal request is OpenAI-shaped inside; here it becomes a Messages body: system and developer
messages hoisted into ``system``, tool results into ``tool_result`` blocks of a user turn, tool calls
into ``tool_use`` blocks with their ids, image parts into image blocks, consecutive messages of one
role merged (Anthropic's turns alternate), ``max_tokens`` always set (Anthropic requires it). A text
completion's prompt is one user turn. Answers come back the other way: ``tool_use`` blocks as tool
calls, stop reasons in the gateway's vocabulary (the stop sequence kept), usage with cache reads and
writes. Anthropic's stream is named events; its ``error`` event fails the stream in ``adapters/http``.

A request that came in Anthropic's own dialect goes out as the client wrote it (``native``), with
only the model replaced: the fields the gateway does not model reach Anthropic unchanged. Its answer
comes back as the upstream wrote it: a whole message as it is (``Completion.raw``), a stream's events
relayed one by one as frames (thinking signatures, redacted thinking, server-tool blocks, citations
and block types the gateway does not know included); what the gateway accounts for (finish, usage)
is read beside them. A relayed stream that breaks mid-text is resumed on the next target with the
partial text as its prefill (``routing/resume.py``, which reads the relayed events back with this
wire's reader); one that broke in a tool call or thinking ends in an ``error`` event.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import pydantic_core

from gateway.core.errors import InvalidRequest, UpstreamMalformed
from gateway.core.request import ChatMessage, Feature, InternalRequest, Operation
from gateway.core.response import (
    Choice,
    Completion,
    Delta,
    Finish,
    FinishReason,
    Frame,
    StreamEvent,
    StreamStart,
    Usage,
    UsageReport,
)
from gateway.dialects.common import token_count
from gateway.dialects.end_user import anthropic_user

JSON = Any
F = Feature
VERSION = "2023-06-01"  # the anthropic-version every Anthropic SDK sends
DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; other dialects may leave it out
FEATURES = frozenset({F.STOP, F.TOP_K, F.TOOLS, F.THINKING, F.EFFORT, F.ANTHROPIC_NATIVE, F.PREFILL, F.THOUGHTS})
STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
UNSERVED_SAMPLING = ("presence_penalty", "frequency_penalty")


def image_block(url: str) -> dict[str, JSON]:
    if url.startswith("data:"):
        head, _, data = url[5:].partition(",")
        media_type, _, encoding = head.partition(";")
        if encoding == "base64":
            return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def blocks(content: JSON, where: str) -> list[dict[str, JSON]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            out.append({"type": "text", "text": part.get("text") or ""})
        elif kind == "image_url":
            image = part.get("image_url")
            out.append(image_block(image.get("url", "") if isinstance(image, dict) else str(image)))
        else:
            raise InvalidRequest(f"'{where}[{j}]': a '{kind}' part has no Anthropic form", param=f"{where}[{j}]")
    return out


def tool_use(call: JSON, where: str) -> dict[str, JSON]:
    fn = call.get("function") or {}
    try:
        arguments = pydantic_core.from_json(fn.get("arguments") or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise InvalidRequest(f"'{where}.function.arguments' is not a JSON object", param=f"{where}.function.arguments")
    return {"type": "tool_use", "id": call.get("id") or "", "name": fn.get("name") or "", "input": arguments}


def turn(m: ChatMessage, i: int) -> tuple[str, list[dict[str, JSON]]]:
    where = f"messages[{i}]"
    if m.role == "tool":
        text = m.content if isinstance(m.content, str) else "".join(b["text"] for b in blocks(m.content, where))
        return "user", [{"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": text}]
    out = blocks(m.content, f"{where}.content")
    out += [tool_use(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(m.tool_calls or ())]
    return ("assistant" if m.role == "assistant" else "user"), out


def messages(req: InternalRequest) -> tuple[str, list[dict[str, JSON]]]:
    """The system text and the alternating turns."""
    if req.operation is Operation.COMPLETION:
        prompt = req.prompts[0] if req.prompts else ""
        return "", [{"role": "user", "content": [{"type": "text", "text": str(prompt)}]}]
    system: list[str] = []
    turns: list[dict[str, JSON]] = []
    for i, m in enumerate(req.messages):
        if m.role in ("system", "developer"):
            system += [b["text"] for b in blocks(m.content, f"messages[{i}].content")]
            continue
        role, content = turn(m, i)
        if not content:
            continue  # an empty turn: Anthropic refuses one, and it says nothing
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += content
        else:
            turns.append({"role": role, "content": content})
    return "\n\n".join(system), turns


def tool_choice(choice: JSON, parallel: bool | None) -> JSON:
    out: dict[str, JSON] | None = None
    if choice == "auto":
        out = {"type": "auto"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        out = {"type": "none"}
    elif isinstance(choice, dict):
        out = {"type": "tool", "name": (choice.get("function") or {}).get("name") or ""}
    if parallel is False:
        out = (out or {"type": "auto"}) | {"disable_parallel_tool_use": True}
    return out


def tool(t: JSON, i: int) -> dict[str, JSON]:
    fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
    if not isinstance(fn, dict):
        raise InvalidRequest(f"'tools[{i}]': only function tools have an Anthropic form", param=f"tools[{i}]")
    out: dict[str, JSON] = {"name": fn.get("name") or "", "input_schema": fn.get("parameters") or {"type": "object"}}
    if fn.get("description"):
        out["description"] = fn["description"]
    return out


def encode(req: InternalRequest, model: str, passthrough: bool = True) -> dict[str, JSON]:
    if passthrough and req.native is not None and native(req):  # an Anthropic client's own body, as it came
        return {**req.native, "model": model}
    s = req.sampling
    for name in UNSERVED_SAMPLING:
        if getattr(s, name) is not None:
            raise InvalidRequest(f"'{name}' is not supported by Anthropic targets", param=name)
    system, turns = messages(req)
    body: dict[str, JSON] = {"model": model, "max_tokens": s.max_tokens or DEFAULT_MAX_TOKENS, "messages": turns}
    if system:
        body["system"] = system
    for name in ("temperature", "top_p", "top_k"):
        if getattr(s, name) is not None:
            body[name] = getattr(s, name)
    if s.stop:
        body["stop_sequences"] = list(s.stop)
    chat = req.chat
    if chat is not None:
        if chat.tools:
            body["tools"] = [tool(t, i) for i, t in enumerate(chat.tools)]
            choice = tool_choice(chat.tool_choice, chat.parallel_tool_calls)
            if choice is not None:
                body["tool_choice"] = choice
        if chat.reasoning and "thinking" in chat.reasoning:
            body["thinking"] = chat.reasoning["thinking"]
        if chat.reasoning and "effort" in chat.reasoning:
            body["output_config"] = {"effort": chat.reasoning["effort"]}
    if req.user is not None:
        body["metadata"] = {"user_id": anthropic_user(req.user)}
    if req.stream:
        body["stream"] = True
    return body


# --- answers -------------------------------------------------------------------------------------


def usage_from(data: JSON, start: Usage | None = None) -> Usage:
    """Anthropic's usage (input tokens exclude cache reads and writes) as the gateway counts it."""
    base = start or Usage()
    cached = base.cached_tokens or 0
    written = base.cache_write_tokens or 0
    fresh = base.prompt_tokens - cached - written
    if "input_tokens" in data and data["input_tokens"] is not None:
        fresh = token_count(data["input_tokens"], "input_tokens")
    if data.get("cache_read_input_tokens") is not None:
        cached = token_count(data["cache_read_input_tokens"], "cache_read_input_tokens")
    if data.get("cache_creation_input_tokens") is not None:
        written = token_count(data["cache_creation_input_tokens"], "cache_creation_input_tokens")
    output = base.completion_tokens
    if data.get("output_tokens") is not None:
        output = token_count(data["output_tokens"], "output_tokens")
    return Usage(fresh + cached + written, output, cached_tokens=cached, cache_write_tokens=written)


def finish(reason: JSON) -> FinishReason:
    if not isinstance(reason, str):
        raise UpstreamMalformed("upstream answer has no stop_reason")
    return STOP_REASONS.get(reason, "stop")


def tool_call(block: JSON, index: int | None = None) -> dict[str, JSON]:
    call: dict[str, JSON] = {"id": block.get("id") or "", "type": "function"}
    call["function"] = {
        "name": block.get("name") or "",
        "arguments": pydantic_core.to_json(block.get("input") or {}).decode(),
    }
    return call if index is None else {"index": index, **call}


def native(request: InternalRequest) -> bool:
    """The client speaks Anthropic's dialect: the answer goes back to it as the upstream wrote it."""
    return request.native is not None and request.native_dialect == "anthropic"


def decode(data: JSON, keep: bool = False) -> Completion:
    if not isinstance(data, dict) or data.get("type") != "message" or not isinstance(data.get("content"), list):
        raise UpstreamMalformed("upstream answer is not an Anthropic message")
    text, reasoning, calls = "", None, []
    for block in data["content"]:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text += str(block.get("text") or "")
        elif kind == "tool_use":
            calls.append(tool_call(block))
        elif kind == "thinking":
            reasoning = (reasoning or "") + str(block.get("thinking") or "")
    stop = data["stop_sequence"] if isinstance(data.get("stop_sequence"), str) else None
    choice = Choice(0, text, finish(data.get("stop_reason")), role="assistant", tool_calls=calls or None)
    choice.reasoning, choice.stop_sequence = reasoning, stop
    usage = data.get("usage")
    return Completion(
        id=str(data.get("id") or ""),
        created=int(time.time()),
        model=str(data.get("model") or ""),
        choices=[choice],
        usage=usage_from(usage) if isinstance(usage, dict) else None,
        raw=data if keep else None,
    )


# The events of an Anthropic target's stream that the gateway accounts nothing for (a block's start,
# deltas and end; pings), each one line of JSON whose type is its name, as Anthropic writes them. For an
# Anthropic client a run of them at a read's start is relayed as it came, one frame, not decoded and
# written again; ``message_start`` (the stream's identity), ``message_delta`` (finish and usage),
# ``message_stop``, ``error`` and any other event or framing are read as before.
RELAYED_RUN = re.compile(
    rb'(?:event: (content_block_delta|content_block_start|content_block_stop|ping)\ndata: \{"type":"\1"[^\n\r]*\}\n\n)+'
)


class EventReader:
    """Anthropic's named stream events → internal events. Tool-use blocks are numbered in order: the
    tool-call index an OpenAI-shaped client sees."""

    def __init__(self, relay: bool = False) -> None:
        self.relay_all = relay  # each event also goes to the client as it came (a ``Frame``)
        self.relaying = relay  # runs of content events go as read (``relay_run``)
        self.started = False
        self.stopping = False  # its finish came (``message_delta``)
        self.finished = False  # and then its end (``message_stop``)
        self.usage: Usage | None = None
        self.tools = -1  # the open tool block's call index

    def relay(self, data: bytes) -> Frame | None:
        return None

    def relay_run(self, buffer: bytes) -> tuple[Frame, int] | None:
        """The run of content events ``buffer`` opens with (``RELAYED_RUN``), as one frame of as many
        chunks, and where it ends; None before the stream's first event or when it opens otherwise.
        What decoding them would keep is nothing: an Anthropic client's reader keeps no delta."""
        if not self.started or (run := RELAYED_RUN.match(buffer)) is None:
            return None
        end = run.end()
        return Frame.of(buffer[:end], buffer.count(b"\n\n", 0, end)), end

    def same_shape(self, buffer: bytes) -> bool:
        return False

    def _block_start(self, data: JSON) -> list[StreamEvent]:
        block = data.get("content_block") or {}
        kind = block.get("type")
        if kind == "tool_use":
            self.tools += 1
            start = tool_call(block, self.tools)
            start["function"]["arguments"] = ""
            return [Delta(0, tool_calls=(start,))]
        if kind == "text" and block.get("text"):
            return [Delta(0, str(block["text"]))]
        return []

    def _delta(self, data: JSON) -> list[StreamEvent]:
        delta = data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            return [Delta(0, str(delta.get("text") or ""))]
        if kind == "input_json_delta":
            piece = {"index": self.tools, "function": {"arguments": str(delta.get("partial_json") or "")}}
            return [Delta(0, tool_calls=(piece,))]
        if kind == "thinking_delta":
            return [Delta(0, reasoning=str(delta.get("thinking") or ""))]
        return []  # signature_delta, citations_delta: nothing the gateway's vocabulary holds

    def decode(self, data: JSON) -> list[StreamEvent]:
        events = self._read(data)
        if not self.relay_all:
            return events
        kind = data.get("type") if isinstance(data, dict) else None
        frame = Frame.of(b"event: " + str(kind).encode() + b"\ndata: " + pydantic_core.to_json(data) + b"\n\n", 1)
        # The frame carries the content; only what the gateway accounts for is read beside it.
        kept: list[StreamEvent] = [ev for ev in events if not isinstance(ev, Delta)]
        return [*kept, frame]

    def _read(self, data: JSON) -> list[StreamEvent]:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "message_start":
            message = data.get("message") or {}
            self.started = True
            usage = message.get("usage")
            self.usage = usage_from(usage) if isinstance(usage, dict) else None
            return [
                StreamStart(
                    str(message.get("id") or ""), int(time.time()), str(message.get("model") or ""), None, False
                )
            ]
        if not self.started:
            raise UpstreamMalformed(f"upstream stream opened with {kind!r}, not message_start")
        if kind == "content_block_start":
            return self._block_start(data)
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "message_delta":
            delta = data.get("delta") or {}
            usage = data.get("usage")
            if isinstance(usage, dict):
                self.usage = usage_from(usage, self.usage)
            self.stopping = True
            stop = delta.get("stop_sequence") if isinstance(delta.get("stop_sequence"), str) else None
            return [Finish(0, finish(delta.get("stop_reason")), None, stop)]
        if kind == "message_stop":
            # The stream's end, after its finish: a body that ends before it was cut, even past the
            # ``message_delta`` (Anthropic's streaming docs: every stream ends with ``message_stop``).
            self.finished = self.stopping
        return []  # ping, content_block_stop

    def finish(self) -> list[StreamEvent]:
        return [UsageReport(self.usage)] if self.usage is not None else []


@dataclass(frozen=True, slots=True)
class AnthropicWire:
    features: frozenset[Feature] = FEATURES
    extras: frozenset[Feature] = frozenset()
    done_sentinel: bool = False  # the stream ends with message_stop and the connection's end
    # A vLLM replica's /v1/messages: its base URL ends in /v1 (OpenAI's convention), and it takes the
    # key as ``Authorization: Bearer``.
    bearer: bool = False
    passthrough: bool = True  # false (a target's ``passthrough: false``): an Anthropic client's body translated
    # the answer goes back as the upstream wrote it; not vLLM's, whose messages lack fields Anthropic's
    # SDKs read (``stop_sequence``): it is rebuilt in Anthropic's whole shape
    relay: bool = True

    def path(self, operation: Operation) -> str:
        return "/messages" if self.bearer else "/v1/messages"

    def headers(self, key: str | None, team: str | None, request: InternalRequest) -> dict[str, str]:
        headers = {"anthropic-version": VERSION}
        if key:
            headers["Authorization" if self.bearer else "x-api-key"] = f"Bearer {key}" if self.bearer else key
        if request.anthropic_beta:
            headers["anthropic-beta"] = request.anthropic_beta
        return headers

    def encode(self, request: InternalRequest, model: str) -> dict[str, JSON]:
        return encode(request, model, self.passthrough)

    def decode(self, data: JSON, request: InternalRequest) -> Completion:
        return decode(data, self.relay and self.passthrough and native(request))

    def reader(self, request: InternalRequest) -> EventReader:
        return EventReader(self.relay and self.passthrough and native(request))


ANTHROPIC_WIRE = AnthropicWire()
# ``passthrough: false``: what only Anthropic's own wire carries is refused by name, not sent
# (nor thinking sent back: Anthropic takes a Claude's signed thinking only as it came)
ANTHROPIC_TRANSLATED_WIRE = AnthropicWire(FEATURES - {F.ANTHROPIC_NATIVE, F.THOUGHTS}, passthrough=False)
# An Anthropic client's own body to a vLLM replica that serves /v1/messages (vLLM 0.32 does). Not a
# prefill: vLLM's Messages path answers a final assistant turn with a new turn (its anthropic/serving.py
# sets no continue_final_message, 0.32); its chat path continues it.
VLLM_MESSAGES_WIRE = AnthropicWire(FEATURES - {F.PREFILL}, bearer=True, relay=False)

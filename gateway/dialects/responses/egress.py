"""A Responses client's body to an upstream's own ``/v1/responses`` (a ``Wire``): OpenAI's (every
field and item type as the client wrote it: hosted tools, reasoning items, item types the gateway
does not model) and vLLM's (the same path, stateless here: the gateway keeps the chain).

The answer comes back as the upstream wrote it: a whole ``response`` object is rendered as it is
(``Completion.raw``), a stream's events are relayed one by one as frames, each as it came (its JSON
re-serialized, keys and values unchanged). What the gateway accounts for is read beside them: the
identity at ``response.created``, text and call deltas, usage and the finish at the terminal event
(``response.completed``, ``.incomplete``, ``.failed``).

State (docs/dialects.md, "OpenAI Responses"): the gateway's store is the one every chain is read
from, team by team, whatever target made a response. A ``previous_response_id`` whose response an
OpenAI target made goes to an OpenAI target as it is (OpenAI keeps its own state, reasoning included);
any other chain goes out rebuilt as ``input`` (the stored items, with the gateway's item ids and the
reasoning items no upstream knows taken out), ``previous_response_id`` dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_core import to_json

from gateway.core.errors import UpstreamMalformed
from gateway.core.request import Feature, InternalRequest, Operation
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
from gateway.dialects.common import openai_headers
from gateway.dialects.responses.parse import Turn

JSON = Any
F = Feature
FEATURES = frozenset({F.TOOLS, F.REASONING, F.JSON_SCHEMA, F.JSON_OBJECT, F.EXTRA_BODY, F.RESPONSES_NATIVE})
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
# Item fields of the gateway's making that no upstream knows: an item goes back without them.
GATEWAY_KEYS = ("id", "status")
GATEWAY_ITEMS = ("message", "function_call", "function_call_output")  # the kinds the gateway makes


def usage_of(data: JSON) -> Usage | None:
    if not isinstance(data, dict):
        return None
    details_in = data.get("input_tokens_details") or {}
    details_out = data.get("output_tokens_details") or {}
    return Usage(
        prompt_tokens=int(data.get("input_tokens") or 0),
        completion_tokens=int(data.get("output_tokens") or 0),
        cached_tokens=details_in.get("cached_tokens"),
        reasoning_tokens=details_out.get("reasoning_tokens"),
    )


def finish_of(response: JSON) -> FinishReason:
    status = response.get("status")
    if status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        return "content_filter" if reason == "content_filter" else "length"
    if status in ("failed", "cancelled"):
        return "abort"
    output = response.get("output") or []
    return "tool_calls" if any(isinstance(i, dict) and i.get("type") == "function_call" for i in output) else "stop"


def choice_of(response: JSON) -> Choice:
    """What the gateway reads of an answer: its text and function calls (chat's shape), its finish."""
    texts: list[str] = []
    calls: list[JSON] = []
    for item in response.get("output") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            texts += [p.get("text") or "" for p in item.get("content") or [] if isinstance(p, dict)]
        elif item.get("type") == "function_call":
            function = {"name": item.get("name"), "arguments": item.get("arguments")}
            calls.append({"id": item.get("call_id"), "type": "function", "function": function})
    return Choice(0, "".join(texts), finish_of(response), role="assistant", tool_calls=calls or None)


def portable(items: list[JSON]) -> list[JSON]:
    """A stored chain as another request's ``input``: item ids and statuses go (the gateway made
    them, or an upstream that is not the one asked now); a reasoning item goes unless it carries its
    ``encrypted_content`` (the one form an upstream takes back without its own state)."""
    out = []
    for item in items:
        kind = item.get("type")
        if kind == "reasoning" and not item.get("encrypted_content"):
            continue
        out.append({k: v for k, v in item.items() if k not in GATEWAY_KEYS} if kind in GATEWAY_ITEMS else item)
    return out


@dataclass(frozen=True, slots=True)
class ResponsesWire:
    """An upstream's ``/v1/responses`` (its base URL ends in ``/v1``, as OpenAI's convention has it).
    ``stateful``: the upstream keeps responses itself (OpenAI), so a chain it began goes to it by id."""

    features: frozenset[Feature]
    stateful: bool
    provider: str
    extras: frozenset[Feature] = frozenset()
    done_sentinel: bool = False  # a stream ends with its terminal event and the connection's end

    def path(self, operation: Operation) -> str:
        return "/responses"

    def headers(self, key: str | None, team: str | None, request: InternalRequest) -> dict[str, str]:
        return openai_headers(key, team, request)

    def encode(self, request: InternalRequest, model: str) -> dict[str, JSON]:
        body = {**(request.native or {}), "model": model}
        if request.sampling.max_tokens is not None:  # the client's, or a hard budget's (``limits.plan.bounded``)
            body["max_output_tokens"] = request.sampling.max_tokens
        turn: Turn = request.reply
        if turn.previous is None or (self.stateful and turn.previous_upstream == self.provider):
            return body
        body.pop("previous_response_id", None)
        given = body.get("input")
        now = [{"type": "message", "role": "user", "content": given}] if isinstance(given, str) else list(given or [])
        body["input"] = portable(turn.history) + now
        return body

    def decode(self, data: JSON, request: InternalRequest) -> Completion:
        if not isinstance(data, dict) or data.get("object") != "response" or not isinstance(data.get("id"), str):
            raise UpstreamMalformed("a /v1/responses answer that is not a response object")
        turn: Turn = request.reply
        turn.id, turn.upstream = data["id"], self.provider
        created = data.get("created_at")
        return Completion(
            id=data["id"],
            created=int(created) if isinstance(created, int | float) else 0,
            model=str(data.get("model") or ""),
            choices=[choice_of(data)],
            usage=usage_of(data.get("usage")),
            raw=data,
        )

    def reader(self, request: InternalRequest) -> EventReader:
        return EventReader(request.reply, self.provider)


class EventReader:
    """A Responses stream's events: each relayed as a frame, as it came; the gateway's accounting
    read beside it (a ``ChunkReader``)."""

    __slots__ = ("finished", "provider", "started", "turn")

    relaying = False  # every event is read (``decode``): its name and JSON make its frame
    usage: Usage | None = None  # a Responses stream reports its usage at its end only

    def __init__(self, turn: Turn, provider: str) -> None:
        self.turn, self.provider = turn, provider
        self.started = False
        self.finished = False

    def relay(self, data: bytes) -> Frame | None:
        return None

    def relay_run(self, buffer: bytes) -> tuple[Frame, int] | None:
        return None

    def same_shape(self, buffer: bytes) -> bool:
        return False

    def decode(self, data: JSON) -> list[StreamEvent]:
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            raise UpstreamMalformed("a Responses stream event without a type")
        events: list[StreamEvent] = []
        if not self.started:
            response = data.get("response")
            if kind != "response.created" or not isinstance(response, dict) or not isinstance(response.get("id"), str):
                raise UpstreamMalformed(f"a Responses stream that opens with {kind!r}, not response.created")
            self.started = True
            self.turn.id, self.turn.upstream = response["id"], self.provider
            created = response.get("created_at")
            created = int(created) if isinstance(created, int | float) else 0
            events.append(StreamStart(response["id"], created, str(response.get("model") or ""), token_ids=False))
        events.append(Frame.of(b"event: " + kind.encode() + b"\ndata: " + to_json(data) + b"\n\n", 1))
        if kind == "response.output_text.delta":
            events.append(Delta(0, text=str(data.get("delta") or "")))
        elif kind in TERMINAL:
            events += self._end(data.get("response"), kind)
        return events

    def _end(self, response: JSON, kind: str) -> list[StreamEvent]:
        if not isinstance(response, dict):
            raise UpstreamMalformed(f"{kind} without its response")
        self.finished = True
        if kind != "response.failed":
            self.turn.final = response
        events: list[StreamEvent] = [Finish(0, finish_of(response))]
        usage = usage_of(response.get("usage"))
        return [*events, UsageReport(usage)] if usage is not None else events

    def finish(self) -> list[StreamEvent]:
        return []


OPENAI_RESPONSES_WIRE = ResponsesWire(FEATURES, stateful=True, provider="openai")
# vLLM 0.32's /v1/responses keeps no state unless started so (and then in one process's memory): the
# gateway's store holds every chain; hosted tools and item types vLLM does not model are refused.
VLLM_RESPONSES_WIRE = ResponsesWire(FEATURES - {F.RESPONSES_NATIVE}, stateful=False, provider="vllm")

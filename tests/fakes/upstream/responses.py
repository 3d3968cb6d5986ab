"""OpenAI's own ``POST /v1/responses`` on the fake (the ``openai`` and ``vllm`` kinds), on OpenAI's
documented wire (API reference "Responses" and "Streaming events"; openai-python 3.57.0's
``types/responses``): the ``response`` object with its ``output`` items, and a stream of named SSE
events (``event: TYPE`` then ``data: {...}``) each with its ``sequence_number``, ending with
``response.completed`` (or ``.incomplete``) and the connection's end: no ``[DONE]``.

The answer is the chat fake's (``chat_job``) for the input read as chat messages; items it does not
model (hosted tools' calls, references, anything new) are accepted as OpenAI accepts its own and
kept. A ``web_search`` tool makes the answer open with a ``web_search_call`` item, as OpenAI's does,
with its own events. ``store`` (default true) keeps a response for ``previous_response_id`` (an
unknown id: OpenAI's 404).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Job, chat_job
from tests.fakes.upstream.wire.base import Chunk

JSON = dict[str, Any]
HOSTED = ("web_search", "web_search_preview", "file_search", "code_interpreter", "computer_use_preview", "mcp")


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}{uuid.uuid4().hex[:16]}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict))
    return ""


def _messages(items: list[JSON]) -> list[JSON]:
    """Input items as the chat fake reads them; items of other types are context it does not model."""
    out: list[JSON] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = "system" if item.get("role") == "developer" else item.get("role")
            out.append({"role": role, "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function"}
            call["function"] = {"name": item.get("name"), "arguments": item.get("arguments")}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "content": _text(item.get("output")), "tool_call_id": item.get("call_id")})
    return out


def _items(raw: Any) -> list[JSON]:
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": raw}]}]
    if not isinstance(raw, list) or not all(isinstance(i, dict) for i in raw):
        raise ApiError(400, "Invalid type for 'input': expected a string or an array of input items.", "input")
    return raw


def read(body: JSON, stored: dict[str, JSON]) -> tuple[JSON, list[JSON]]:
    """The chat body the fake's engine answers, and the whole conversation's items (for storing)."""
    if not isinstance(body.get("model"), str):
        raise ApiError(400, "Missing required parameter: 'model'.", "model")
    items = _items(body.get("input"))
    previous = body.get("previous_response_id")
    history: list[JSON] = []
    if previous is not None:
        if previous not in stored:
            raise ApiError(404, f"Previous response with id '{previous}' not found.", "previous_response_id")
        history = stored[previous]["conversation"]
    conversation = history + items
    head = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    tools = [
        {"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters") if k in t}}
        for t in body.get("tools") or []
        if t.get("type") == "function"
    ]
    chat: JSON = {
        "model": body["model"],
        "messages": head + _messages(conversation),
        "stream": bool(body.get("stream")),
    }
    if tools:
        chat["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and not isinstance(choice.get("name"), str):  # OpenAI's check, its words
            raise ApiError(400, "Missing required parameter: 'tool_choice.name'.", "tool_choice.name")
        chat["tool_choice"] = (
            {"type": "function", "function": {"name": choice["name"]}} if isinstance(choice, dict) else choice
        )
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    return chat, conversation


def _searches(body: JSON) -> bool:
    return any(t.get("type") in ("web_search", "web_search_preview") for t in body.get("tools") or [])


def _usage(job: Job) -> JSON:
    u = job.usage()
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": u["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": u["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u["total_tokens"],
    }


def _response(body: JSON, rid: str, created: int, status: str, output: list[JSON], job: Job | None) -> JSON:
    incomplete = status == "incomplete"
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": job.model if job is not None else body["model"],
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": _usage(job) if job is not None and status in ("completed", "incomplete") else None,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def _search_item(body: JSON, status: str) -> JSON:
    query = _text((_items(body.get("input")) or [{}])[-1].get("content"))[:40]
    return {
        "type": "web_search_call",
        "id": "ws_" + uuid.uuid4().hex,
        "status": status,
        "action": {"type": "search", "query": query},
    }


class Answer:
    """One job drawn as Responses output: its items whole, or its events in order."""

    def __init__(self, body: JSON, job: Job) -> None:
        self.body, self.job = body, job
        self.id, self.created = _id("resp"), int(time.time())
        choice = job.choices[0]
        self.status = (
            "incomplete" if choice.steps[-1].finish_reason == "length" and job.tool_call is None else "completed"
        )
        self.ids = ("ws_" + uuid.uuid4().hex, _id("msg"), _id("fc"))
        self.seq = 0

    def items(self) -> list[JSON]:
        out: list[JSON] = []
        if _searches(self.body):
            out.append({**_search_item(self.body, "completed"), "id": self.ids[0]})
        text = self.job.choices[0].text
        call = self.job.tool_call
        if call is not None:
            out.append(
                {
                    "type": "function_call",
                    "id": self.ids[2],
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": text,
                    "status": "completed",
                }
            )
        else:
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            out.append(
                {"type": "message", "id": self.ids[1], "status": self.status, "role": "assistant", "content": [part]}
            )
        return out

    def whole(self) -> JSON:
        return _response(self.body, self.id, self.created, self.status, self.items(), self.job)

    def _event(self, kind: str, fields: JSON, token: bool = False) -> Chunk:
        chunk = Chunk({"type": kind, "sequence_number": self.seq, **fields}, token, event=kind)
        self.seq += 1
        return chunk

    def events(self) -> Iterator[Chunk]:
        begun = _response(self.body, self.id, self.created, "in_progress", [], None)
        yield self._event("response.created", {"response": begun})
        yield self._event("response.in_progress", {"response": begun})
        done = self.items()
        for index, item in enumerate(done):
            yield from self._item(index, item)
        final = "response.incomplete" if self.status == "incomplete" else "response.completed"
        yield self._event(final, {"response": self.whole()})

    def _item(self, index: int, item: JSON) -> Iterator[Chunk]:
        at = {"output_index": index, "item_id": item["id"]}
        kind = item["type"]
        if kind == "web_search_call":
            yield self._event(
                "response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress"}}
            )
            for phase in ("in_progress", "searching", "completed"):
                yield self._event(f"response.web_search_call.{phase}", at)
        elif kind == "function_call":
            yield self._event(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "arguments": "", "status": "in_progress"}},
            )
            for step in self.job.choices[0].steps:
                yield self._event("response.function_call_arguments.delta", {**at, "delta": step.text}, True)
            yield self._event(
                "response.function_call_arguments.done", {**at, "name": item["name"], "arguments": item["arguments"]}
            )
        else:
            yield self._event(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "content": []}},
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            where = {**at, "content_index": 0}
            yield self._event("response.content_part.added", {**where, "part": part})
            for step in self.job.choices[0].steps:
                if step.text:
                    yield self._event("response.output_text.delta", {**where, "delta": step.text, "logprobs": []}, True)
            text = item["content"][0]["text"]
            yield self._event("response.output_text.done", {**where, "text": text, "logprobs": []})
            yield self._event("response.content_part.done", {**where, "part": {**part, "text": text}})
        yield self._event("response.output_item.done", {"output_index": index, "item": item})


def answer(state: Any, body: JSON, request_id: str, tool: str | None, tool_arg: str) -> tuple[Answer, list[JSON]]:
    chat, conversation = read(body, state.stored)
    job = chat_job(state.engine, chat, request_id, tool, tool_arg or "")
    return Answer(body, job), conversation


def keep(state: Any, body: JSON, drawn: Answer, conversation: list[JSON]) -> None:
    if body.get("store", True) is not False:
        state.stored[drawn.id] = {"conversation": conversation + drawn.items()}


def whole(drawn: Answer) -> web.Response:
    return web.Response(text=json.dumps(drawn.whole(), separators=(",", ":")), content_type="application/json")

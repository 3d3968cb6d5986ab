"""Anthropic's Messages API (``POST /v1/messages``, anthropic SDK 2.14.0's types and Anthropic's streaming
docs): ``x-api-key``, ``anthropic-version`` required, a body with ``max_tokens`` required, ``system``
apart from ``messages``, turns alternating between ``user`` and ``assistant``, tools with
``input_schema``; answers as a ``message`` with content blocks, stop reasons (``end_turn``,
``max_tokens``, ``stop_sequence`` with the sequence, ``tool_use``) and usage whose ``input_tokens``
leave cache reads and writes out; streams as named events (``message_start``, ``content_block_start``,
``ping``, ``content_block_delta``, ``content_block_stop``, ``message_delta``, ``message_stop``; no
``[DONE]``); errors as ``{"type": "error", "error": {...}, "request_id": ...}``. Also ``POST
/v1/messages/count_tokens``: the same body less what only a generation takes (refused as extra
inputs), answered ``{"input_tokens": N}``.

The body is read onto the chat job the other wires use (its turns rendered to the fake's chat), so the
answer is the same deterministic text as every other kind's for the same last message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Job
from tests.fakes.upstream.wire.base import JSON, Chunk, Wire

ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
TOOL_CHOICES: Final = {"auto": "auto", "any": "required", "none": "none"}


def bad(message: str) -> ApiError:
    return ApiError(400, message)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


def turns(messages: Any) -> list[JSON]:
    """Anthropic's turns as the fake's chat messages; its rules, in its words."""
    if not isinstance(messages, list) or not messages:
        raise bad("messages: at least one message is required")
    out: list[JSON] = []
    last = None  # the role of the last user or assistant turn (a system turn sits between them)
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in ("user", "assistant", "system"):  # system: beta mid-conversation-system-2026-04-07
            raise bad(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
        if role == "system":
            out.append({"role": "system", "content": text_of(content)})
            continue
        if last == role:
            raise bad(
                'messages: roles must alternate between "user" and "assistant", but found multiple '
                f'"{role}" roles in a row'
            )
        if not content:
            raise bad(f"messages.{i}: all messages must have non-empty content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for r in results:
            out.append({"role": "tool", "content": text_of(r.get("content") or ""), "tool_call_id": r["tool_use_id"]})
        if len(results) < len(blocks):
            out.append({"role": role, "content": text_of(blocks)})
        last = role
    return out


def read(body: JSON) -> JSON:
    if "max_tokens" not in body:
        raise bad("max_tokens: Field required")
    user_id(body.get("metadata") or {})
    system = body.get("system")
    messages = ([{"role": "system", "content": text_of(system)}] if system else []) + turns(body.get("messages"))
    out: JSON = {"model": body.get("model"), "messages": messages, "max_tokens": body["max_tokens"]}
    if messages[-1]["role"] == "assistant":
        # a prefill: Anthropic's answer continues the final assistant turn, which must not end in
        # whitespace (its 400 "final assistant content cannot end with trailing whitespace")
        if messages[-1]["content"] != messages[-1]["content"].rstrip():
            raise bad("messages: final assistant content cannot end with trailing whitespace")
        out |= {"continue_final_message": True, "add_generation_prompt": False}
    for name in ("temperature", "top_p", "top_k", "stream"):
        if name in body:
            out[name] = body[name]
    if body.get("stop_sequences"):
        out["stop"] = body["stop_sequences"]
    if body.get("stream"):
        out["stream_options"] = {"include_usage": True}
    tools = body.get("tools")
    if tools:
        out["tools"] = [
            {"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
            for t in tools
            if "input_schema" in t  # a server tool (web_search_...) Anthropic runs itself: never called here
        ]
        choice = body.get("tool_choice") or {"type": "auto"}
        named = {"type": "function", "function": {"name": choice.get("name")}}
        out["tool_choice"] = TOOL_CHOICES.get(choice.get("type"), named)
    return out


def user_id(metadata: JSON) -> None:
    """``metadata.user_id`` as Anthropic judges it: at most 256 characters (its documented bound), and
    opaque: one that looks like an email address is refused (its 400's own words)."""
    user = metadata.get("user_id")
    if not isinstance(user, str):
        return
    if len(user) > 256:
        raise bad("metadata.user_id: String should have at most 256 characters")
    if "@" in user:
        raise bad("metadata.user_id: user_id appears to contain an email address. Please send a uuid or hash value")


# What only a generation takes: Anthropic's count_tokens refuses each as an extra input (anthropic SDK
# 2.14.0's ``MessageCountTokensParams`` has none of them).
GENERATION_ONLY: Final = ("max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream")


def count_read(body: JSON) -> JSON:
    """``POST /v1/messages/count_tokens``'s body read as the chat whose prompt it counts."""
    for name in GENERATION_ONLY:
        if name in body:
            raise bad(f"{name}: Extra inputs are not permitted")
    return read(body | {"max_tokens": 1})


def usage(job: Job, output: int | None = None) -> JSON:
    prompt = sum(len(p.ids) for p in job.prompts)
    cached = min(job.cached, prompt)
    written = min(job.cache_written, prompt - cached)
    out = job.usage()["completion_tokens"] if output is None else output
    return {
        "input_tokens": prompt - cached - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
        "output_tokens": out,
    }


def stop(job: Job) -> tuple[str, str | None]:
    step = job.choices[0].steps[-1]
    if step.finish_reason == "length":
        return "max_tokens", None
    if step.finish_reason == "tool_calls":
        return "tool_use", None
    if isinstance(step.stop_reason, str):
        return "stop_sequence", step.stop_reason
    return "end_turn", None


def head(job: Job) -> JSON:
    return {"id": f"msg_{job.id}", "type": "message", "role": "assistant", "model": job.model}


def content(job: Job) -> list[JSON]:
    text = job.choices[0].text
    if job.tool_call is None:
        return [{"type": "text", "text": text}]
    return [{"type": "tool_use", "id": job.tool_call.id, "name": job.tool_call.name, "input": json.loads(text)}]


def body(job: Job, chat: bool) -> JSON:
    reason, sequence = stop(job)
    return head(job) | {"content": content(job), "stop_reason": reason, "stop_sequence": sequence, "usage": usage(job)}


def chunks(job: Job, chat: bool) -> Iterator[Chunk]:
    message = head(job) | {"content": [], "stop_reason": None, "stop_sequence": None, "usage": usage(job, 1)}
    yield Chunk({"type": "message_start", "message": message}, False, "message_start")
    call = job.tool_call
    block = (
        {"type": "text", "text": ""}
        if call is None
        else {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
    )
    yield Chunk({"type": "content_block_start", "index": 0, "content_block": block}, False, "content_block_start")
    yield Chunk({"type": "ping"}, False, "ping")
    for step in job.choices[0].steps:
        if not step.text:
            continue
        delta = (
            {"type": "text_delta", "text": step.text}
            if call is None
            else {"type": "input_json_delta", "partial_json": step.text}
        )
        yield Chunk({"type": "content_block_delta", "index": 0, "delta": delta}, True, "content_block_delta")
    yield Chunk({"type": "content_block_stop", "index": 0}, False, "content_block_stop")
    reason, sequence = stop(job)
    delta = {"stop_reason": reason, "stop_sequence": sequence}
    output = {"output_tokens": usage(job)["output_tokens"]}
    yield Chunk({"type": "message_delta", "delta": delta, "usage": output}, False, "message_delta")
    yield Chunk({"type": "message_stop"}, False, "message_stop")


def error(exc: ApiError) -> JSON:
    kind = ERROR_TYPES.get(exc.status, "api_error" if exc.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}, "request_id": "req_fake"}


WIRE: Final = Wire(
    "anthropic",
    "/v1",
    body,
    chunks,
    error,
    read=read,
    done=False,
    key_header="x-api-key",
    chat_path="/messages",
    error_event=True,
    version_header="anthropic-version",
)

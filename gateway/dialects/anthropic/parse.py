"""Anthropic Messages bodies → the internal request (a chat request, OpenAI-shaped inside).

Every piece of prompt text goes into the request, so the pre-request token estimate counts it: the
system blocks become one system message, ``tool_result`` blocks become tool messages (their text; an
error result's text marked as such), images become image parts of the user message, tool schemas
become the request's tools. What only an Anthropic target takes (unmodelled keys and blocks, earlier
turns' thinking, citations) is named in ``native.py``: it goes to Anthropic targets in the body as it
came, and every other target refuses it by name. ``cache_control`` marks are accepted and, for
targets other than Anthropic, ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from pydantic_core import to_json

from gateway.core import caps
from gateway.core.errors import InvalidRequest
from gateway.core.request import ChatMessage, ChatOptions, Feature, InternalRequest, Operation, Sampling
from gateway.dialects.anthropic.native import THOUGHT_BLOCKS, Kept, checked_copy
from gateway.dialects.anthropic.schema import (
    PLATFORM_FIELDS,
    Block,
    CountTokensBody,
    ImageBlock,
    MessageParam,
    MessagesBody,
    TextBlock,
    ThinkingBlock,
    Tool,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.common import FeatureSet, check, plain_number, request_of, stop_list, validated
from gateway.dialects.openai.schema import STREAM_FORMAT

JSON = Any
BlockAt = Callable[[int], str]  # a turn's block index in the copy → its path in the client's body
SAME = Kept()  # a body nothing was taken out of

# Betas whose effect the gateway gives on every target: prompt caching's marks are accepted (and kept
# for Anthropic targets), tool arguments stream as the upstream writes them, tool definitions need no
# other wire format, a system turn mid-conversation stays in its place. Any other beta is refused by
# name: it changes what Anthropic answers. Claude Code sends the last three by default.
HONOURED_BETAS = frozenset(
    {
        "prompt-caching-2024-07-31",
        "fine-grained-tool-streaming-2025-05-14",
        "token-efficient-tools-2025-02-19",
        "mid-conversation-system-2026-04-07",  # a system turn is a chat wire's system message in its place
        "claude-code-20250219",  # names the client (Claude Code): nothing in the answer's shape
        "prompt-caching-scope-2026-01-05",  # a caching hint: what other targets cache is their own
        # a thinking delta's lossy display estimate, null unless thinking is omitted (never, off Anthropic)
        "thinking-token-count-2026-05-13",
        # turns on ``context_management``, which is judged by itself (``context_kept``)
        "context-management-2025-06-27",
    }
)
# Betas that only turn on a field or a behaviour of one: served wherever that feature is (vLLM's
# /v1/messages takes thinking and effort), refused by name elsewhere.
BETA_FEATURES: dict[str, Feature] = {
    "interleaved-thinking-2025-05-14": Feature.THINKING,
    "effort-2025-11-24": Feature.EFFORT,
}
EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})  # output_config.effort's levels
ERROR_PREFIX = "Error: "  # an ``is_error`` tool result's text, as the model sees it on other targets


def betas_of(headers: Mapping[str, str]) -> str:
    """The request's ``anthropic-beta`` values, comma-separated: every one goes on to an Anthropic
    target (an honoured one changes what Anthropic answers too, and a system turn needs its beta)."""
    return ",".join(b for b in (b.strip() for b in headers.get("anthropic-beta", "").split(",")) if b)


def unhonoured(betas: str) -> list[str]:
    """Of ``betas``, those only Anthropic's platform can honour."""
    return [b for b in betas.split(",") if b and b not in HONOURED_BETAS and b not in BETA_FEATURES]


def platform_only(data: dict[str, JSON], betas: str, effort: str | None, fs: FeatureSet) -> None:
    """Anthropic's platform features: served by Anthropic targets (the body goes as it came), refused
    by name, with the reason, by every other target; a beta of a feature, where that feature is, and
    an ``output_config`` of an ``effort`` alone (``effort_of``) is that feature, not Anthropic's; a
    ``context_management`` that edits nothing here (``context_kept``) is served everywhere."""
    if only := unhonoured(betas):
        fs.use(Feature.ANTHROPIC_NATIVE, f"anthropic-beta {only[0]}")
    for beta in betas.split(","):
        if beta in BETA_FEATURES:
            fs.use(BETA_FEATURES[beta], f"anthropic-beta {beta}")
    for name, why in PLATFORM_FIELDS.items():
        if name in data and not _served(name, data, effort):
            fs.use(Feature.ANTHROPIC_NATIVE, name, why=why)


def _served(name: str, data: dict[str, JSON], effort: str | None) -> bool:
    """Whether a platform field is one every target serves here: an effort alone, edits of nothing."""
    if name == "output_config":
        return effort is not None
    return name == "context_management" and context_kept(data[name], data.get("messages"))


def context_kept(config: JSON, turns: JSON) -> bool:
    """A ``context_management`` whose edits change nothing in this conversation: thinking clearing
    (``clear_thinking_20251015``) that keeps every turn's thinking, or the last N turns' when no older
    assistant turn holds any (Claude Code sends ``keep: "all"``). Every target serves it: there is
    nothing to edit. Any other edit, or one that would clear, only Anthropic's platform applies."""
    if type(config) is not dict or not config.keys() <= {"edits"} or type(turns) is not list:
        return False
    edits = config.get("edits", [])
    return type(edits) is list and all(_clears_nothing(e, turns) for e in edits)


def _clears_nothing(edit: JSON, turns: list[JSON]) -> bool:
    if type(edit) is not dict or edit.get("type") != "clear_thinking_20251015" or not edit.keys() <= {"type", "keep"}:
        return False
    keep = edit.get("keep", {"type": "thinking_turns", "value": 1})  # Anthropic's default: the last turn's
    if keep == "all" or keep == {"type": "all"}:
        return True
    if type(keep) is not dict or keep.keys() != {"type", "value"} or keep["type"] != "thinking_turns":
        return False
    kept = keep["value"]
    if type(kept) is not int or kept < 1:
        return False
    older = [m for m in turns if type(m) is dict and m.get("role") == "assistant"][:-kept]
    return not any(_thinks(m.get("content")) for m in older)


def _thinks(content: JSON) -> bool:
    return type(content) is list and any(type(b) is dict and b.get("type") in THOUGHT_BLOCKS for b in content)


def effort_of(config: JSON) -> str | None:
    """An ``output_config`` of only a known ``effort``: its level (vLLM's /v1/messages takes it as its
    reasoning effort); None for any other (only Anthropic's platform takes that)."""
    if type(config) is not dict or config.keys() != {"effort"} or type(config["effort"]) is not str:
        return None  # (a list or an object is unhashable: looked up in EFFORTS, it raised TypeError)
    if config["effort"] not in EFFORTS:
        return None
    return str(config["effort"])


def text_of(blocks: Sequence[TextBlock]) -> str:
    return "\n\n".join(b.text for b in blocks)


def image_part(block: ImageBlock) -> dict[str, JSON]:
    src = block.source
    url = src.url if src.type == "url" else f"data:{src.media_type};base64,{src.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _non_empty(blocks: Sequence[Block], where: str, block_at: BlockAt) -> None:
    if not blocks:
        raise InvalidRequest(f"'{where}' must not be empty", param=where)
    for j, b in enumerate(blocks):
        if isinstance(b, TextBlock) and not b.text:
            at = f"{block_at(j)}.text"
            raise InvalidRequest(f"'{at}' must not be empty", param=at)


def tool_message(block: ToolResultBlock) -> tuple[ChatMessage, list[dict[str, JSON]]]:
    """A tool result as a tool message, and its images (a tool message holds text only on OpenAI's
    wire: they follow it in a user message)."""
    content = block.content
    if isinstance(content, list):
        text = text_of([p for p in content if isinstance(p, TextBlock)])
        images = [image_part(p) for p in content if isinstance(p, ImageBlock)]
    else:
        text, images = content or "", []
    if block.is_error:
        text = ERROR_PREFIX + text
    return ChatMessage(role="tool", content=text, tool_call_id=block.tool_use_id), images


def tool_call(block: ToolUseBlock) -> dict[str, JSON]:
    arguments = to_json(block.input).decode()
    return {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}}


def user_messages(blocks: Sequence[Block], block_at: BlockAt) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    parts: list[dict[str, JSON]] = []
    for j, b in enumerate(blocks):
        if isinstance(b, ToolResultBlock):
            msg, images = tool_message(b)
            out.append(msg)
            parts += images
        elif isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            parts.append(image_part(b))
        else:
            at = block_at(j)
            raise InvalidRequest(f"'{at}': a '{b.type}' block belongs to an assistant turn", param=at)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        content = "\n\n".join(p["text"] for p in parts) if only_text else tuple(parts)
        out.append(ChatMessage(role="user", content=content))
    return out


def assistant_message(blocks: Sequence[Block], block_at: BlockAt) -> ChatMessage:
    """An assistant turn: its text, its tool calls and its thinking as the turn's reasoning (redacted
    thinking is opaque: only Anthropic reads it, and vLLM passes over it too)."""
    texts: list[str] = []
    calls: list[dict[str, JSON]] = []
    thoughts: list[str] = []
    for j, b in enumerate(blocks):
        if isinstance(b, TextBlock):
            texts.append(b.text)
        elif isinstance(b, ToolUseBlock):
            calls.append(tool_call(b))
        elif isinstance(b, ThinkingBlock):
            thoughts.append(b.thinking)
        elif b.type in ("image", "tool_result"):
            at = block_at(j)
            raise InvalidRequest(f"'{at}': a '{b.type}' block belongs to a user turn", param=at)
    return ChatMessage(
        role="assistant",
        content="".join(texts) or None,
        tool_calls=tuple(calls) or None,
        reasoning="".join(thoughts) or None,
    )


def messages(
    system: str | list[TextBlock] | None, params: Sequence[MessageParam], kept: Kept = SAME
) -> tuple[ChatMessage, ...]:
    """The turns as chat messages; an error names the block where ``kept`` says the client has it."""
    out: list[ChatMessage] = []
    if system:
        out.append(ChatMessage(role="system", content=system if isinstance(system, str) else text_of(system)))
    for i, m in enumerate(params):
        if len(m.content) == 1 and type(text := m.content[0]) is TextBlock and text.text:
            out.append(ChatMessage(role=m.role, content=text.text))  # a turn of one text: most turns
            continue
        where = f"messages[{i}].content"
        block_at: BlockAt = partial(kept.at, "messages", i, "content")
        _non_empty(m.content, where, block_at)
        if m.role == "user":
            out += user_messages(m.content, block_at)
        elif m.role == "system":
            out.append(system_message(m.content, block_at))
        else:
            out.append(assistant_message(m.content, block_at))
    return tuple(out)


def system_message(blocks: Sequence[Block], block_at: BlockAt) -> ChatMessage:
    """A system turn mid-conversation: its text, in its place (a chat wire's system message)."""
    texts: list[TextBlock] = []
    for j, b in enumerate(blocks):
        if not isinstance(b, TextBlock):
            at = block_at(j)
            raise InvalidRequest(f"'{at}': a system turn holds only text blocks, not '{b.type}'", param=at)
        texts.append(b)
    return ChatMessage(role="system", content=text_of(texts))


def function(tool: Tool, i: int, fs: FeatureSet) -> dict[str, JSON]:
    if tool.type not in (None, "custom"):
        # Anthropic runs it: its body goes to Anthropic targets as it came; other targets refuse it
        fs.use(Feature.ANTHROPIC_NATIVE, f"tools[{i}]", why=f"server tool '{tool.type}', run only by Anthropic")
        return {"type": "function", "function": {"name": tool.name, "parameters": {"type": "object"}}}
    if tool.input_schema is None:
        raise InvalidRequest(f"'tools[{i}].input_schema' is required", param=f"tools[{i}].input_schema")
    fn: dict[str, JSON] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        fn["description"] = tool.description
    return {"type": "function", "function": fn}


def tool_choice(choice: ToolChoice | None) -> JSON:
    if choice is None or choice.type == "auto":
        return "auto" if choice is not None else None
    if choice.type == "any":
        return "required"
    if choice.type == "none":
        return "none"
    if not choice.name:
        raise InvalidRequest("'tool_choice.name' is required when its type is 'tool'", param="tool_choice.name")
    return {"type": "function", "function": {"name": choice.name}}


def chat_options(b: CountTokensBody, fs: FeatureSet) -> ChatOptions | None:
    thinking = b.thinking if b.thinking is not None and b.thinking.type != "disabled" else None
    if thinking is not None and thinking.type == "enabled" and thinking.budget_tokens is None:
        # Anthropic's own 400: an enabled thinking is its budget (every wire's mapping reads it)
        raise InvalidRequest(
            "'thinking.budget_tokens' is required when its type is 'enabled'", param="thinking.budget_tokens"
        )
    fs.use(Feature.THINKING, "thinking", thinking)
    if not b.tools and thinking is None:
        if b.tool_choice is not None and b.tool_choice.type in ("any", "tool"):
            raise InvalidRequest("'tool_choice' needs 'tools'", param="tool_choice")
        return None
    fs.use(Feature.TOOLS, "tools", b.tools)
    choice = b.tool_choice
    parallel = False if choice is not None and choice.disable_parallel_tool_use else None
    return ChatOptions(
        tools=tuple(function(t, i, fs) for i, t in enumerate(b.tools)) if b.tools else None,
        tool_choice=tool_choice(choice) if b.tools else None,
        parallel_tool_calls=parallel if b.tools else None,
        reasoning={"thinking": thinking.model_dump(exclude_none=True)} if thinking is not None else None,
    )


def with_effort(chat: ChatOptions | None, effort: str | None, fs: FeatureSet) -> ChatOptions | None:
    """``chat`` carrying ``output_config.effort`` beside the thinking (an Anthropic wire writes it back)."""
    fs.use(Feature.EFFORT, "output_config.effort", effort)
    if effort is None:
        return chat
    chat = chat if chat is not None else ChatOptions()
    return dataclasses.replace(chat, reasoning={**(chat.reasoning or {}), "effort": effort})


# The Messages body most clients send: a model, a length, turns of one text each, perhaps a system
# string, temperature, top_p and a stream. Read by type checks alone (``typed_plain``): the schema's
# validation, the copy for what only Anthropic takes and the feature walk cost about 9 us of a 13 us
# parse (benchmarks/results/messages.md). tests/unit/test_plain_parse.py holds it to the full parse.
PLAIN_FIELDS = frozenset({"model", "max_tokens", "messages", "system", "temperature", "top_p", "stream"})
ROLES = frozenset({"user", "assistant"})


def _plain_text(content: JSON) -> str | None:
    """A turn's content when it is one text, a string or one text block of nothing else, not empty."""
    if type(content) is list:
        if len(content) != 1 or type(block := content[0]) is not dict or len(block) != 2:
            return None
        if block.get("type") != "text":
            return None
        content = block.get("text")
    return content if type(content) is str and content else None


def _typed_turns(system: JSON, turns: JSON) -> tuple[ChatMessage, ...] | None:
    """``messages(system, turns)`` for a system string and turns of one text; None for any other shape."""
    if type(turns) is not list or not turns or (system is not None and type(system) is not str):
        return None
    out = [ChatMessage(role="system", content=system)] if system else []
    for m in turns:
        if type(m) is not dict or len(m) != 2:
            return None
        role, text = m.get("role"), _plain_text(m.get("content"))
        if text is None or type(role) is not str or role not in ROLES:
            return None
        out.append(ChatMessage(role=role, content=text))
    return tuple(out) if out[-1].role == "user" else None  # a prefill: the full parse names it


def typed_plain(data: dict[str, JSON], betas: str) -> InternalRequest | None:
    """A plain Messages body (``PLAIN_FIELDS``) read by type checks alone: the request ``parse`` builds
    from it, or None for any value the schema might coerce, refuse or read otherwise (the full parse
    then judges it). A plain body holds nothing only Anthropic takes: it is its own checked copy."""
    model, max_tokens, stream = data.get("model"), data.get("max_tokens"), data.get("stream")
    if betas or not data.keys() <= PLAIN_FIELDS or type(model) is not str or len(model) > caps.MAX_NAME:
        return None
    if type(max_tokens) is not int or not 1 <= max_tokens <= caps.MAX_TOKENS:
        return None
    temperature, top_p = data.get("temperature"), data.get("top_p")
    if not (plain_number(temperature, 1) and plain_number(top_p, 1)):
        return None
    if stream is not None and type(stream) is not bool:
        return None
    msgs = _typed_turns(data.get("system"), data.get("messages"))
    if msgs is None:
        return None
    check(data)  # the caps, as the full parse checks its copy (the same body here)
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=None if temperature is None else float(temperature),
        top_p=None if top_p is None else float(top_p),
    )
    return InternalRequest(
        operation=Operation.CHAT,
        model=model,
        messages=msgs,
        sampling=sampling,
        stream=bool(stream),
        stream_usage=bool(stream),
        relay=STREAM_FORMAT if stream else None,
        native=data,
        native_dialect="anthropic",
    )


def prefill(turns: Sequence[MessageParam], fs: FeatureSet) -> None:
    """A final assistant turn is a prefill: Anthropic's answer continues it, and a target whose wire
    would answer it with a new turn instead refuses it by name."""
    last = len(turns) - 1
    why = "a final assistant turn (a prefill) would be answered with a new turn, not continued"
    fs.use(Feature.PREFILL, f"messages[{last}]", turns[last].role == "assistant", why=why)


def parse(data: dict[str, JSON], betas: str = "") -> InternalRequest:
    typed = typed_plain(data, betas)
    if typed is not None:
        return typed
    return parse_full(data, betas)


def parse_full(data: dict[str, JSON], betas: str = "") -> InternalRequest:
    """Any Messages body: its copy without what only Anthropic takes validated by the schema."""
    fs = FeatureSet()
    effort = effort_of(data.get("output_config"))
    platform_only(data, betas, effort, fs)
    rest = {k: v for k, v in data.items() if k not in PLATFORM_FIELDS}
    check(rest)  # the client's body: the copy's lists lack the blocks taken out
    copy, kept = checked_copy(rest, MessagesBody.model_fields, fs)
    b = validated(MessagesBody, copy, kept.origin)
    top_k = b.top_k if b.top_k not in (None, -1) else None
    fs.use(Feature.TOP_K, "top_k", top_k is not None)
    stop = stop_list(b.stop_sequences, "stop_sequences", cap=None)
    fs.use(Feature.STOP, "stop_sequences", stop)
    if any(not s for s in stop):
        raise InvalidRequest("'stop_sequences' must not hold an empty string", param="stop_sequences")
    chat = with_effort(chat_options(b, fs), effort, fs)
    prefill(b.messages, fs)
    stream = bool(b.stream)
    return request_of(
        fs,
        Operation.CHAT,
        b.model,
        messages=messages(b.system, b.messages, kept),
        sampling=Sampling(max_tokens=b.max_tokens, temperature=b.temperature, top_p=b.top_p, top_k=top_k, stop=stop),
        chat=chat,
        stream=stream,
        stream_usage=stream,
        # an OpenAI-wire target's text chunks are relayed and written as Messages events in bytes
        relay=STREAM_FORMAT if stream else None,
        user=b.metadata.user_id if b.metadata is not None else None,
        anthropic_beta=betas or None,
        native=data,
        native_dialect="anthropic",
    )


def parse_count(data: dict[str, JSON], betas: str = "") -> InternalRequest:
    """A count_tokens body: the request it would be, with no answer asked for; the body itself kept for
    an Anthropic target's own count, with the request's betas (a count is never refused for them:
    every other target's count is the gateway's own, which no beta changes)."""
    fs = FeatureSet()
    rest = {k: v for k, v in data.items() if k not in PLATFORM_FIELDS}
    check(rest)
    copy, kept = checked_copy(rest, CountTokensBody.model_fields, fs)
    b = validated(CountTokensBody, copy, kept.origin)
    return request_of(
        fs,
        Operation.CHAT,
        b.model,
        messages=messages(b.system, b.messages, kept),
        sampling=Sampling(max_tokens=1),
        chat=chat_options(b, fs),
        anthropic_beta=betas or None,
        native=data,  # what an Anthropic target is asked to count, as it came
        native_dialect="anthropic",
    )

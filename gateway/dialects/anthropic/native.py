"""What of a Messages body only an Anthropic target can honour: found by path, and taken out of the copy
the schema checks.

The body itself goes to Anthropic targets as it came (``InternalRequest.native``); each part named here
is a use of ``Feature.ANTHROPIC_NATIVE``, so every other target refuses the request naming it instead
of dropping it. The class: any key or block the schema does not model (a field Anthropic added, a
server-tool block, ``document``, ``search_result``), and the modelled parts no other target can be
given (citations). Earlier turns' thinking is ``Feature.THOUGHTS``: Anthropic's and vLLM's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gateway.core.request import Feature
from gateway.dialects.anthropic.schema import (
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.dialects.common import FeatureSet

JSON = Any
BLOCKS: dict[str, type[BaseModel]] = {
    "text": TextBlock,
    "image": ImageBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "thinking": ThinkingBlock,
    "redacted_thinking": RedactedThinkingBlock,
}
# what ``_block`` answers for a block only Anthropic takes: not None, which a client may send as a block
# (the schema refuses it by path)
NATIVE_ONLY: JSON = object()
RESULT_PARTS = ("text", "image")  # what a tool_result's content may hold for other targets
THOUGHT_BLOCKS = ("thinking", "redacted_thinking")  # taken where the wire takes a turn's reasoning


def _block(block: JSON, at: str, fs: FeatureSet, allowed: tuple[str, ...]) -> JSON:
    """The block as the schema checks it, or ``NATIVE_ONLY`` where only Anthropic takes it."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return block  # the schema names what is wrong with it
    kind = block["type"]
    if kind not in allowed or kind not in BLOCKS:
        fs.use(Feature.ANTHROPIC_NATIVE, f"{at}.type", why=f"'{kind}' block, not modelled by the gateway")
        return NATIVE_ONLY
    if kind in THOUGHT_BLOCKS:
        # thinking sent back: an Anthropic target takes it as it came, vLLM as the turn's reasoning
        fs.use(Feature.THOUGHTS, at, why=f"a '{kind}' block: earlier turns' thinking")
        return block
    known = BLOCKS[kind].model_fields
    out = {}
    for key, value in block.items():
        if key not in known:
            fs.use(Feature.ANTHROPIC_NATIVE, f"{at}.{key}", why="not modelled by the gateway")
        elif key == "citations" and value:
            fs.use(Feature.ANTHROPIC_NATIVE, f"{at}.citations", why="only an Anthropic target takes them")
        else:
            out[key] = value
    if kind == "tool_result" and isinstance(out.get("content"), list):
        out["content"] = _blocks(out["content"], f"{at}.content", fs, RESULT_PARTS)
    return out


def _blocks(blocks: list[JSON], at: str, fs: FeatureSet, allowed: tuple[str, ...]) -> list[JSON]:
    kept = (_block(b, f"{at}[{j}]", fs, allowed) for j, b in enumerate(blocks))
    return [b for b in kept if b is not NATIVE_ONLY]


def checked_copy(data: dict[str, JSON], fields: dict[str, Any], fs: FeatureSet) -> dict[str, JSON]:
    """``data`` less what only Anthropic takes (each part recorded in ``fs`` by its path)."""
    out: dict[str, JSON] = {}
    for key, value in data.items():
        if key not in fields:
            fs.use(Feature.ANTHROPIC_NATIVE, key, why="not modelled by the gateway")
        elif key == "messages" and isinstance(value, list):
            out[key] = [_message(m, f"messages[{i}]", fs) for i, m in enumerate(value)]
        elif key == "system" and isinstance(value, list):
            out[key] = _blocks(value, "system", fs, ("text",))
        else:
            out[key] = value
    return out


def _message(message: JSON, at: str, fs: FeatureSet) -> JSON:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    kept = _blocks(content, f"{at}.content", fs, tuple(BLOCKS))
    # a turn of nothing but Anthropic's own blocks: the request is refused elsewhere, kept whole here
    return {**message, "content": kept if kept or not content else [{"type": "text", "text": "-"}]}

"""What of a Messages body only an Anthropic target can honour: found by path, and taken out of the copy
the schema checks.

The body itself goes to Anthropic targets as it came (``InternalRequest.native``); each part named here
is a use of ``Feature.ANTHROPIC_NATIVE``, so every other target refuses the request naming it instead
of dropping it. The class: any key or block the schema does not model (a field Anthropic added, a
server-tool block, ``document``, ``search_result``), and the modelled parts no other target can be
given (citations). Earlier turns' thinking is ``Feature.THOUGHTS``: Anthropic's and vLLM's.

A block taken out shifts the indices of those after it: ``Kept`` says where each block of the copy
stands in the client's body, so that an error names the block the client sent (``Kept.origin``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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
from gateway.dialects.refusals import written

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
Path = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class Kept:
    """For each block list a block was taken out of (by its path in the client's body), the client's
    index of each block the copy holds; lists nothing was taken out of are not here."""

    lists: dict[Path, tuple[int, ...]] = field(default_factory=dict)

    def origin(self, parts: Sequence[int | str]) -> list[int | str]:
        """A path in the copy → the same field's path in the client's body."""
        out: list[int | str] = []
        for part in parts:
            indices = self.lists.get(tuple(out), ()) if isinstance(part, int) else ()
            out.append(indices[part] if isinstance(part, int) and 0 <= part < len(indices) else part)
        return out

    def at(self, *parts: int | str) -> str:
        """``origin``, written as the client would (``messages[0].content[2]``)."""
        return written(self.origin(parts))


def _block(block: JSON, at: Path, fs: FeatureSet, allowed: tuple[str, ...], kept: Kept) -> JSON:
    """The block as the schema checks it, or ``NATIVE_ONLY`` where only Anthropic takes it."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return block  # the schema names what is wrong with it
    kind, where = block["type"], written(at)
    if kind not in allowed or kind not in BLOCKS:
        fs.use(Feature.ANTHROPIC_NATIVE, f"{where}.type", why=f"'{kind}' block, not modelled by the gateway")
        return NATIVE_ONLY
    if kind in THOUGHT_BLOCKS:
        # thinking sent back: an Anthropic target takes it as it came, vLLM as the turn's reasoning
        fs.use(Feature.THOUGHTS, where, why=f"a '{kind}' block: earlier turns' thinking")
        return block
    known = BLOCKS[kind].model_fields
    out = {}
    for key, value in block.items():
        if key not in known:
            fs.use(Feature.ANTHROPIC_NATIVE, f"{where}.{key}", why="not modelled by the gateway")
        elif key == "citations" and value:
            fs.use(Feature.ANTHROPIC_NATIVE, f"{where}.citations", why="only an Anthropic target takes them")
        else:
            out[key] = value
    if kind == "tool_result" and isinstance(out.get("content"), list):
        out["content"] = _blocks(out["content"], (*at, "content"), fs, RESULT_PARTS, kept)
    return out


def _blocks(blocks: list[JSON], at: Path, fs: FeatureSet, allowed: tuple[str, ...], kept: Kept) -> list[JSON]:
    checked = [(j, _block(b, (*at, j), fs, allowed, kept)) for j, b in enumerate(blocks)]
    out = [(j, b) for j, b in checked if b is not NATIVE_ONLY]
    if len(out) < len(blocks):
        kept.lists[at] = tuple(j for j, _ in out)
    return [b for _, b in out]


def checked_copy(data: dict[str, JSON], fields: dict[str, Any], fs: FeatureSet) -> tuple[dict[str, JSON], Kept]:
    """``data`` less what only Anthropic takes (each part recorded in ``fs`` by its path), and where
    the copy's blocks stand in ``data``."""
    out: dict[str, JSON] = {}
    kept = Kept()
    for key, value in data.items():
        if key not in fields:
            fs.use(Feature.ANTHROPIC_NATIVE, key, why="not modelled by the gateway")
        elif key == "messages" and isinstance(value, list):
            out[key] = [_message(m, ("messages", i), fs, kept) for i, m in enumerate(value)]
        elif key == "system" and isinstance(value, list):
            out[key] = _blocks(value, ("system",), fs, ("text",), kept)
        else:
            out[key] = value
    return out, kept


def _message(message: JSON, at: Path, fs: FeatureSet, kept: Kept) -> JSON:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    blocks = _blocks(content, (*at, "content"), fs, tuple(BLOCKS), kept)
    # a turn of nothing but Anthropic's own blocks: the request is refused elsewhere, kept whole here
    return {**message, "content": blocks if blocks or not content else [{"type": "text", "text": "-"}]}

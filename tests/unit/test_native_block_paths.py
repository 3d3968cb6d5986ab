"""An Anthropic refusal names a block where the client has it, whatever blocks only Anthropic takes come
before it. Those blocks (``document``, ``search_result``, server-tool blocks) are taken out of the copy
the schema checks (``anthropic/native.py``), which shifts every later block's index: the schema's errors
and the parse's own (an empty text, a block in the wrong turn) once named the copy's index, so a client
was sent looking for its fault one block too early.

The property: a body with a native block laid before every block list's first block is refused naming
the same field as the body without them, its indices in those lists one further on.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import HealthCheck, given, settings

from gateway.core.errors import GatewayError
from gateway.core.request import Operation
from gateway.dialects import ANTHROPIC
from tests.support.rich_bodies import MESSAGES, mutations

JSON = Any
Path = tuple[str | int, ...]
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}
SEARCH = {"type": "search_result", "source": "s", "title": "t", "content": [{"type": "text", "text": "r"}]}
URL = {"type": "url", "url": "https://example.com/a.png"}
COUNT = {k: v for k, v in MESSAGES.items() if k not in ("max_tokens", "metadata")}


def refusal(body: dict[str, JSON], flavour: str) -> str | None:
    """The field a refusal names (its ``param``); None when the body parses or names none."""
    try:
        ANTHROPIC.parse(Operation.CHAT, body, flavour)
    except GatewayError as exc:
        return exc.param
    return None


def block_lists(body: dict[str, JSON]) -> list[Path]:
    """The paths of the body's non-empty block lists: ``system``, each turn's content and each tool
    result's content, the lists a native block may stand in."""
    found: list[Path] = []
    if isinstance(body.get("system"), list) and body["system"]:
        found.append(("system",))
    turns = body.get("messages")
    for i, turn in enumerate(turns if isinstance(turns, list) else []):
        content = turn.get("content") if isinstance(turn, dict) else None
        if not isinstance(content, list) or not content:
            continue
        found.append(("messages", i, "content"))
        for j, block in enumerate(content):
            inner = block.get("content") if isinstance(block, dict) and block.get("type") == "tool_result" else None
            if isinstance(inner, list) and inner:
                found.append(("messages", i, "content", j + 1, "content"))  # j + 1: after its list's own
    return found


def with_natives(body: dict[str, JSON], lists: list[Path]) -> dict[str, JSON]:
    out = copy.deepcopy(body)
    for at in lists:  # outer lists first: an inner list's path already counts the outer's new block
        node: JSON = out
        for key in at:
            node = node[key]
        node.insert(0, SEARCH if at[-1] == "content" and len(at) > 3 else DOCUMENT)
    return out


def parts(param: str) -> list[str | int]:
    return [int(i) if i else name for name, i in re.findall(r"([A-Za-z_]\w*)|\[(\d+)\]", param)]


def shifted(param: str, lists: list[Path]) -> list[str | int]:
    """``param``'s path with its index one further on in each list a native block went before."""
    out: list[str | int] = []
    for part in parts(param):
        out.append(part + 1 if isinstance(part, int) and tuple(out) in lists else part)
    return out


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(mutations(MESSAGES), mutations(COUNT))
def test_a_refusal_names_the_clients_block_whatever_native_blocks_come_first(
    messages: tuple[Any, dict[str, JSON]], count: tuple[Any, dict[str, JSON]]
) -> None:
    for (_, body), flavour in ((messages, ""), (count, "count_tokens")):
        plain = refusal(body, flavour)
        lists = block_lists(body)
        native = refusal(with_natives(body, lists), flavour)
        if plain is None or not lists:
            continue
        assert native is not None and parts(native) == shifted(plain, lists), (body, plain, native)


def test_each_kind_of_refusal_after_a_native_block() -> None:
    def turn(role: str, *blocks: JSON) -> dict[str, JSON]:
        return {"model": "m", "max_tokens": 4, "messages": [{"role": role, "content": [DOCUMENT, *blocks]}]}

    result = {"type": "tool_result", "tool_use_id": "t", "content": [SEARCH, {"type": "text"}]}
    cases = [
        (turn("user", {"type": "text"}), "messages[0].content[1].text"),  # the schema's
        (turn("user", {"type": "text", "text": 5}), "messages[0].content[1].text"),
        (turn("user", {"type": "text", "text": "a"}, {"type": "text", "text": ""}), "messages[0].content[2].text"),
        (turn("user", {"type": "tool_use", "id": "a", "name": "f", "input": {}}), "messages[0].content[1]"),
        (turn("assistant", {"type": "text", "text": "a"}, {"type": "image", "source": URL}), "messages[0].content[2]"),
        (turn("user", result), "messages[0].content[1].content[1].text"),
        (turn("user", 7), "messages[0].content[1]"),
    ]
    for body, named in cases:
        assert refusal(body, "") == named, body

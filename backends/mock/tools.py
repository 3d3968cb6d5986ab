"""The mock's tool calls and thinking, sans-IO: which tool an answer calls with which arguments, and
whether it thinks first. Pure functions of the request; ``engine.py`` paces and sends them.

A chat offered tools answers in text, as a model that chose none, unless the request forces a call
(``tool_choice`` ``required`` or a named function: Anthropic's ``any`` and ``tool``) or the last turn
is the user's (system messages aside) and says ``[mock-tool NAME]`` or ``[mock-tool NAME {"a": 1}]``
(NAME one of the tools; ``tool_choice: none`` still answers in text). After the tool's result the
last turn is no longer the user's, so the mock answers it in text. The arguments are the marker's
JSON object, else the least value the tool's JSON schema admits (``least``).

Thinking: Anthropic's ``thinking: {type: enabled}`` makes the mock think a sentence first, within its
``budget_tokens``; ``adaptive`` leaves it to the model, and the mock chooses not to. ``output_config``'s
``effort`` is a hint the mock's fixed answers need not heed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.core.request import InternalRequest

JSON = Any
MARKER = re.compile(r"\[mock-tool ([A-Za-z0-9_.:-]+)(?: (\{.*\}))?\]", re.DOTALL)  # the JSON nests
ARGUMENT_DEPTH = 8  # a schema nested deeper gets {} there: a mock need not fill it all


def call(request: InternalRequest) -> tuple[str, dict[str, JSON]] | None:
    """The tool the answer calls and its arguments, or None for a text answer."""
    chat = request.chat
    if chat is None or not chat.tools or chat.tool_choice == "none":
        return None
    tools = {t["function"]["name"]: t["function"] for t in chat.tools if isinstance(t.get("function"), dict)}
    named = _named(request, tools)
    if named is not None:
        return named
    choice = chat.tool_choice
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
    elif choice == "required":
        name = next(iter(tools), None)
    else:
        return None
    if not isinstance(name, str) or name not in tools:
        return None
    return name, least(tools[name].get("parameters"))


def _named(request: InternalRequest, tools: dict[str, JSON]) -> tuple[str, dict[str, JSON]] | None:
    """A ``[mock-tool NAME ...]`` in the last turn, when that turn is the user's and NAME is offered
    (system messages after it are instructions, not turns: Claude Code sends one there)."""
    turns = [m for m in request.messages if m.role != "system"]
    if not turns or turns[-1].role != "user":
        return None
    content = turns[-1].content
    texts = [content] if isinstance(content, str) else [p.get("text") for p in content or () if isinstance(p, dict)]
    for text in texts:
        for found in MARKER.finditer(text if isinstance(text, str) else ""):
            name, given = found.group(1), found.group(2)
            if name in tools:
                return name, _object(given) if given else least(tools[name].get("parameters"))
    return None


def _object(text: str) -> dict[str, JSON]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def least(schema: JSON, depth: int = 0) -> JSON:
    """The least value a JSON schema admits, for its required properties: a ``const`` or an enum's
    first value, else by type: ``"mock"``, ``minimum`` or 0, false, [] (``minItems`` of the least
    item), null, and objects of their required properties. An object at the top, always."""
    if not isinstance(schema, dict) or depth > ARGUMENT_DEPTH:
        return {} if depth == 0 else None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return least(schema[key][0], depth)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or depth == 0:
        props: JSON = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        required: JSON = schema.get("required")
        required = required if isinstance(required, list) else []
        return {k: least(props.get(k), depth + 1) for k in required if isinstance(k, str)}
    return _scalar(kind, schema, depth)


def _scalar(kind: JSON, schema: dict[str, JSON], depth: int) -> JSON:
    if kind == "string":
        return "mock" + "x" * max(0, int(_number(schema.get("minLength"))) - 4)
    if kind in ("integer", "number"):
        low = _number(schema.get("minimum", schema.get("exclusiveMinimum")))
        low += 1 if "exclusiveMinimum" in schema else 0
        return int(low) if kind == "integer" else low
    if kind == "boolean":
        return False
    if kind == "array":
        return [least(schema.get("items"), depth + 1) for _ in range(min(int(_number(schema.get("minItems"))), 8))]
    return None


def _number(value: JSON) -> int | float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def thinks(request: InternalRequest) -> int:
    """How many tokens the mock may think before it answers: 0 unless thinking is ``enabled``."""
    reasoning = request.chat.reasoning if request.chat is not None else None
    thinking = (reasoning or {}).get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return 0
    budget = thinking.get("budget_tokens")
    return budget if isinstance(budget, int) and budget > 0 else 1024

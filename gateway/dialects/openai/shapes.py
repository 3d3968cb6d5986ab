"""The OpenAI chat structures the schema keeps as JSON (content parts, tools, tool calls, a named
tool choice), checked where OpenAI defines their shape: a content part has a ``type`` the gateway's
targets take (``PARTS``), and one of OpenAI's holds its fields with their types; a function tool a
name, a tool call a name and string arguments; the ``type`` of a tool or a call, where given, is a
string on every server. What OpenAI does not define (the shape of vLLM's own parts, other tool types)
is the target's to judge. Sans-IO: the errors name the field as the client wrote it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.core.errors import InvalidRequest
from gateway.dialects.refusals import part_type

JSON = Any
Shape = tuple[str, tuple[str, ...] | None]
# Every content part type a target of the gateway takes: any other, or none, is refused naming the
# part's ``type``, as OpenAI's API refuses it (400, ``messages[0].content[0].type``); passed on, it
# reached a server that read the part as nothing. Each of OpenAI's (API reference, Chat Completions,
# "messages") -> its field and that field's string members (None: the field is a string itself; a
# string image_url is vLLM's short form, taken too).
PARTS: dict[str, Shape | None] = {
    "text": ("text", None),
    "refusal": ("refusal", None),  # an assistant's alone (ASSISTANT_PARTS)
    "image_url": ("image_url", ("url",)),
    "input_audio": ("input_audio", ("data", "format")),
    "file": ("file", ()),
    # vLLM 0.32's media parts (vllm/renderers/chat_utils.py, MM_PARSER_MAP): their shape is vLLM's to judge
    "image_embeds": None,
    "audio_url": None,
    "audio_embeds": None,
    "video_url": None,
    "video_embeds": None,
}
ASSISTANT_PARTS = frozenset({"refusal"})
ANY_ROLES_PARTS = tuple(kind for kind in PARTS if kind not in ASSISTANT_PARTS)


def check_content(parts: Sequence[JSON], where: str, role: str) -> None:
    """A message's content parts, at ``where`` (``messages[i].content``), in a message of ``role``."""
    kinds = tuple(PARTS) if role == "assistant" else ANY_ROLES_PARTS
    for j, part in enumerate(parts):
        kind = part.get("type")
        if type(kind) is not str or kind not in kinds:
            raise part_type(part, f"{where}[{j}]", kinds)
        shape = PARTS[kind]
        if shape is None:
            continue
        name, members = shape
        here = f"{where}[{j}].{name}"
        value = part.get(name)
        if members is None or (name == "image_url" and type(value) is str):
            _string(value, here)
            continue
        if type(value) is not dict:
            raise InvalidRequest(f"'{here}' must be an object", param=here)
        for member in members:
            _string(value.get(member), f"{here}.{member}")


def check_tool_calls(calls: Sequence[JSON], where: str) -> None:
    """An assistant message's ``tool_calls``: each function call named, its arguments a string."""
    for j, call in enumerate(calls):
        _name(call.get("type"), f"{where}[{j}].type")
        if call.get("type", "function") != "function":
            continue
        fn = _object(call.get("function"), f"{where}[{j}].function")
        _string(fn.get("name"), f"{where}[{j}].function.name")
        _string(fn.get("arguments"), f"{where}[{j}].function.arguments")


def check_tools(tools: Sequence[JSON] | None, choice: JSON) -> None:
    """``tools`` (each function tool named, its ``parameters`` an object) and a named ``tool_choice``."""
    for i, tool in enumerate(tools or ()):
        _name(tool.get("type"), f"tools[{i}].type")
        if tool.get("type") != "function":
            continue
        fn = _object(tool.get("function"), f"tools[{i}].function")
        _string(fn.get("name"), f"tools[{i}].function.name")
        if fn.get("parameters") is not None:
            _object(fn["parameters"], f"tools[{i}].function.parameters")
    if type(choice) is dict:
        _name(choice.get("type"), "tool_choice.type")
    if type(choice) is dict and choice.get("type") == "function":
        _string(_object(choice.get("function"), "tool_choice.function").get("name"), "tool_choice.function.name")


def _name(kind: JSON, here: str) -> None:
    """A tool's or a call's ``type``, where given: a string on every server (it is looked up); a
    content part's is checked against ``PARTS`` instead."""
    if kind is not None:
        _string(kind, here)


def _string(value: JSON, here: str) -> None:
    if type(value) is not str:
        raise InvalidRequest(f"'{here}' must be a string", param=here)


def _object(value: JSON, here: str) -> dict[str, JSON]:
    if type(value) is not dict:
        raise InvalidRequest(f"'{here}' must be an object", param=here)
    return value

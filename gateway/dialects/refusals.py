"""Refusals in the client's words: a schema's validation error as one sentence naming the field
where the client wrote it (``messages[0].content[1].text``), in JSON's words rather than pydantic's,
and the gateway's own "must be one of" refusals in the same voice.

Pure functions and data only: every dialect's envelope carries these sentences as they are, so these
tables are the one place the wording is chosen.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pydantic
from pydantic_core import ErrorDetails

from gateway.core.errors import InvalidRequest

JSON = Any

Origin = Callable[[Sequence[int | str]], list[int | str]]
"""Where a path in the body a schema validated stands in the client's body, when that body is a copy
with parts taken out (Anthropic's blocks only Anthropic takes): the indices after a part taken out
are not the client's."""


def written(parts: Sequence[int | str]) -> str:
    """A path as the client would write it: ``messages[0].content[1].text``."""
    out = ""
    for j, part in enumerate(parts):
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if j else part
    return out


_STEP = re.compile(r"\[(\d+)\]|\.?([^.\[]+)")


def parts_of(path: str) -> list[int | str]:
    """``written``'s inverse: ``messages[0].content`` → ``["messages", 0, "content"]``."""
    return [int(index) if index else name for index, name in _STEP.findall(path)]


def _loc(data: JSON, loc: Sequence[int | str], kind: str, origin: Origin | None = None) -> str:
    """The client's path to the field (``_parts``), written as the client would."""
    parts = _parts(data, loc, kind)
    return written(origin(parts) if origin is not None else parts)


def _parts(data: JSON, loc: Sequence[int | str], kind: str) -> list[int | str]:
    """The client's path to the field: a location part that does not lead into the body as sent is
    a union member's tag (``list[str]``, ``int``, a model's name) and is left out, so a field named
    like one (``Temperature``) keeps its name."""
    parts: list[int | str] = []
    node = data
    last = len(loc) - 1
    for i, part in enumerate(loc):
        if data is None:  # every part is the client's
            parts.append(part)
        elif isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
            parts.append(part)
            node = node[part]
        elif isinstance(part, str) and isinstance(node, dict) and (part in node or (i == last and kind == "missing")):
            parts.append(part)
            node = node.get(part)
    return parts


def _judged(errors: Sequence[ErrorDetails], data: JSON) -> ErrorDetails:
    """The error to answer with: the first, unless it is a union member's that the value did not take
    (``system`` given blocks is tried as a string first): then the deepest error inside the same
    field, the one of the member the value took, which names the wrong key within it."""
    first = errors[0]
    if data is None or len(errors) == 1:
        return first
    field = _parts(data, first["loc"], first["type"])
    best, depth = first, len(field)
    for err in errors[1:]:
        parts = _parts(data, err["loc"], err["type"])
        if len(parts) > depth and parts[: len(field)] == field:
            best, depth = err, len(parts)
    return best


# pydantic's sentences in the client's words: JSON's types ("an object", not "a valid dictionary or
# instance of TextBlock"), the field's bounds as the gateway's own refusals say them ("must be at least
# 0", "must have at least 1 item"). Each dialect's envelope carries the sentence as it is, so these
# tables are the one place the wording is chosen. A type error's words are a noun phrase: a value a
# union refuses in every member is told every shape it may take ("a string or an array").
_TYPES = {
    "string_type": "a string",
    "bytes_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "none_required": "null",
    "list_type": "an array",
    "tuple_type": "an array",
    "set_type": "an array",
    "frozen_set_type": "an array",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dataclass_type": "an object",
    "dataclass_exact_type": "an object",
    "dict_type": "an object",
    "typed_dict_type": "an object",
    "finite_number": "a finite number",
}
_WORDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "greater_than_equal": lambda ctx: f"must be at least {_number(ctx['ge'])}",
    "greater_than": lambda ctx: f"must be greater than {_number(ctx['gt'])}",
    "less_than_equal": lambda ctx: f"must be at most {_number(ctx['le'])}",
    "less_than": lambda ctx: f"must be less than {_number(ctx['lt'])}",
    "multiple_of": lambda ctx: f"must be a multiple of {_number(ctx['multiple_of'])}",
    "too_short": lambda ctx: f"must have at least {_count(ctx['min_length'], _member(ctx))}",
    "too_long": lambda ctx: f"must have at most {_count(ctx['max_length'], _member(ctx))}",
    "string_too_short": lambda ctx: f"must have at least {_count(ctx['min_length'], 'character')}",
    "string_too_long": lambda ctx: f"must have at most {_count(ctx['max_length'], 'character')}",
    "string_pattern_mismatch": lambda ctx: f"must match the pattern {ctx['pattern']!r}",
    "json_invalid": lambda ctx: "must be valid JSON",
    "json_type": lambda ctx: "must be a string of JSON",
    "is_instance_of": lambda ctx: "has the wrong type",
    "is_subclass_of": lambda ctx: "has the wrong type",
}
_CHOICES = ("literal_error", "enum")  # pydantic's ctx: "'a', 'b' or 'c'"
_OWN = ("value_error", "assertion_error")  # our validators' sentences, behind pydantic's prefix
_TAGS = ("union_tag_invalid", "union_tag_not_found")  # a tagged union's tag (``type``), wrong or absent


def _number(value: Any) -> str:
    """A bound as JSON writes it: ``0``, not pydantic's ``0.0``."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _member(ctx: dict[str, Any]) -> str:
    """What a sized value holds, in JSON's words: an object's keys, an array's items."""
    return "key" if ctx.get("field_type") == "Dictionary" else "item"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _choices(expected: str) -> str:
    """``'a', 'b' or 'c'`` as the gateway lists choices: ``one of 'a', 'b', 'c'``; one choice as itself."""
    listed = expected.replace("' or '", "', '")
    return listed if listed.count("', '") == 0 else f"one of {listed}"


def _shape(err: ErrorDetails) -> str | None:
    """The shape a type error says the value must have, as a noun phrase; None for any other error."""
    kind = err["type"]
    if kind in _CHOICES:
        return _choices(str(err.get("ctx", {}).get("expected", "")))
    return _TYPES.get(kind)


def _shapes(errors: Sequence[ErrorDetails], data: JSON, err: ErrorDetails) -> list[str]:
    """Every shape the field of ``err`` may take, where each of a union's members refused the value
    itself (no error deeper in it): ``str | list[str]`` given ``1``."""
    field = _parts(data, err["loc"], err["type"])
    said: list[str] = []
    for other in errors:
        if _parts(data, other["loc"], other["type"]) != field:
            continue
        shape = _shape(other)
        if shape is None:
            return [s for s in (_shape(err),) if s is not None]
        if shape not in said:
            said.append(shape)
    return said


def _tag(err: ErrorDetails) -> str | None:
    """The key a tagged union is told by (pydantic quotes it: ``'type'``); None for a callable's."""
    name = str(err.get("ctx", {}).get("discriminator", ""))
    return name[1:-1] if len(name) > 2 and name[0] == name[-1] == "'" else None


def _plain(msg: str) -> str:
    """A sentence of pydantic's no table words, with its stock phrases in the gateway's."""
    for stock, ours in (("Input should be", "must be"), ("should have", "must have"), (" after validation", "")):
        msg = msg.replace(stock, ours)
    return msg


def invalid_from(exc: pydantic.ValidationError, data: JSON = None, origin: Origin | None = None) -> InvalidRequest:
    """The validation error to answer with (``_judged``: the first, or the deepest in the union member
    the value took), as one sentence naming the field (in the client's body: ``origin``); without the
    ``data`` validated (another library's models), union tags are told by their look: brackets or a
    capital."""
    errors = exc.errors(include_url=False)
    err = _judged(errors, data)
    kind = err["type"]
    if data is None:
        loc = [p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p[:1].isupper()))]
        field = _loc(None, loc, kind)
    else:
        field = _loc(data, err["loc"], kind, origin)
    if kind in _TAGS and (tag := _tag(err)) is not None:
        field = f"{field}.{tag}" if field else tag
        if kind == "union_tag_not_found":
            return InvalidRequest(f"'{field}' is required", param=field)
        return InvalidRequest(f"'{field}' must be one of {err['ctx']['expected_tags']}", param=field)
    if kind == "extra_forbidden":
        return InvalidRequest(f"unknown field '{field}'", param=field)
    return InvalidRequest(f"'{field}'{_sentence(errors, data, err)}", param=field or None)


def _sentence(errors: Sequence[ErrorDetails], data: JSON, err: ErrorDetails) -> str:
    """What is wrong with the field ``err`` names, to follow its quoted name."""
    kind = err["type"]
    if kind == "missing":
        return " is required"
    if shapes := _shapes(errors, data, err):
        return " must be " + " or ".join(shapes)
    if (words := _WORDS.get(kind)) is not None:
        return " " + words(err.get("ctx", {}))
    msg = str(err["msg"])
    if kind in _OWN:  # a validator of ours speaks for itself
        return ": " + msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    plain = _plain(msg)
    return f" {plain}" if plain.startswith("must ") else f": {plain}"


def not_one_of(field: str, value: JSON, choices: Iterable[str]) -> InvalidRequest:
    """A value outside a fixed set, in ``invalid_from``'s words for one: absent is "required"."""
    if value is None:
        return InvalidRequest(f"'{field}' is required", param=field)
    return InvalidRequest(f"'{field}' must be one of {', '.join(repr(c) for c in choices)}", param=field)


def part_type(part: JSON, at: str, choices: Iterable[str]) -> InvalidRequest:
    """A content part at ``at`` whose ``type`` is not among ``choices``, named where it goes wrong:
    the part itself when it is no object, else its ``type``."""
    if not isinstance(part, dict):
        return InvalidRequest(f"'{at}' must be an object", param=at)
    return not_one_of(f"{at}.type", part.get("type"), choices)

"""A refused config file in the file's own words: where (the key path as the file spells it, a list item
by its ``name`` or ``id``) and why (pydantic's message without its type names, a misspelt key with the
nearest keys of its section). ``gateway.runtime.config`` raises the ``ConfigError`` that carries the
line; the sections themselves and their rules do not belong here.

Sans-IO over pydantic's error list: the root model is passed in, so nothing here imports the config.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Annotated, Any

import pydantic
from pydantic import BaseModel

Loc = tuple[int | str, ...]


class Placed(ValueError):
    """A cross-field check's failure at a path of its own (``teams[2].id``), where pydantic would
    place it at the validator's model."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc


def refusal(exc: pydantic.ValidationError, data: Any, root: type[BaseModel]) -> str:
    """``where: why`` for the first of ``exc``'s errors that says most: a misspelt key also makes its
    right spelling "required", and the misspelling is the news."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    placed = (err.get("ctx") or {}).get("error")
    if isinstance(placed, Placed):  # by position: a label (an id) given twice would not say which
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in (*err["loc"], *placed.loc))
        where = where.lstrip(".")
    else:
        where = _path(_untagged(tuple(err["loc"]), root), data) or "(top level)"
    return f"{where}: {_plain(err, root)}"


def _path(loc: Loc, data: Any) -> str:
    parts: list[str] = []
    node = data
    for p in loc:
        if isinstance(p, int) and isinstance(node, list) and p < len(node):
            node = node[p]
            label = node.get("name") or node.get("id") if isinstance(node, dict) else None
            parts.append(f"[{label!r}]" if label else f"[{p}]")
        elif parts and not isinstance(node, dict) and isinstance(p, str):
            continue  # past a value: pydantic's tag of a union's member (``constrained-int``), not a key
        else:
            node = node.get(p) if isinstance(node, dict) else None
            parts.append(f".{p}" if parts else str(p))
    return "".join(parts)


def _untagged(loc: Loc, root: type[BaseModel]) -> Loc:
    """``loc`` without pydantic's tags of a union's members (``capacity.constrained-int``), which name
    no key of the file: the field types are walked from the top, and the part after a union dropped."""
    out: list[int | str] = []
    node: Any = root
    for part in loc:
        if _is_union(node):
            node = None
            continue
        out.append(part)
        node = bare(_child(node, part))
    return tuple(out)


def _child(node: Any, part: int | str) -> Any:
    """The type under ``part`` of ``node``: a field's, a list item's (``tuple[X, ...]`` → X), a
    mapping's value's (``dict[K, V]`` → V)."""
    if isinstance(node, type) and issubclass(node, BaseModel):
        field = node.model_fields.get(str(part))
        return None if field is None else field.annotation
    args = [a for a in typing.get_args(node) if a is not Ellipsis]
    return args[-1] if args else None


def bare(node: Any) -> Any:
    """``X`` of ``Annotated[X, ...]`` and of ``X | None``; a union of several stays one."""
    while typing.get_origin(node) is Annotated:
        node = typing.get_args(node)[0]
    if _is_union(node):
        real = [a for a in typing.get_args(node) if a is not type(None)]
        return bare(real[0]) if len(real) == 1 else node
    return node


def _is_union(node: Any) -> bool:
    return typing.get_origin(node) in (typing.Union, types.UnionType)


def _section(loc: Loc, root: type[BaseModel]) -> type[BaseModel] | None:
    """The config section (a pydantic model) that holds the key at ``loc``, found by walking the
    field types from the top."""
    node: Any = root
    for part in loc[:-1]:
        node = bare(_child(node, part))
    return node if isinstance(node, type) and issubclass(node, BaseModel) else None


def _unknown(loc: Loc, root: type[BaseModel]) -> str:
    section = _section(loc, root)
    keys = list(section.model_fields) if section is not None else []
    near = difflib.get_close_matches(str(loc[-1]), keys, n=3, cutoff=0.6)
    if near:
        return f"unknown key; did you mean {' or '.join(repr(k) for k in near)}?"
    return f"unknown key (known here: {', '.join(keys)})" if keys else "unknown key"


def _plain(err: Any, root: type[BaseModel]) -> str:
    """pydantic's message in the config's words: no type names (``Tuple``, ``dictionary``)."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "extra_forbidden":
        return _unknown(tuple(err["loc"]), root)
    if kind == "missing":
        return "required"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a mapping (key: value)"
    if kind in ("tuple_type", "list_type"):
        return "must be a list"
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return f"must list at least {n} item{'s' if n != 1 else ''}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return msg.replace("Input should be", "must be", 1)

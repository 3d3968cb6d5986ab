"""The config file's shapes (types, bounds, choices, required and known keys), read off its pydantic
models for the Helm chart, whose ``templates/_config_shape.tpl`` checks ``.Values.config`` against them
and fails with the line ``check-config`` prints. A JSON Schema would say the same, but Helm checks it
before any template runs and in its own words.

Each shape is a small JSON object: ``{"t": "model", "ref": "Target"}`` (``models`` maps each name to its
fields, in pydantic's order: ``[name, shape, required]``), ``list`` (``item``, ``min``), ``dict``
(``key``, ``value``), ``null`` (``of``: ``X | None``), ``union`` (``of``), ``lit`` (``of`` and
pydantic's message), ``str`` (``min``, ``max``), ``int``, ``float``, ``decimal``, ``bool``, ``any``.
Numbers carry their bounds as ``[op, value, text]`` in the order pydantic checks them.

What does not belong here: validating a config (``config.py``), the rules its validators hold in code
(the chart's ``templates/_config_check.tpl`` restates those).
"""

from __future__ import annotations

import types
import typing
from decimal import Decimal
from typing import Annotated, Any, Literal

import annotated_types
import pydantic
from pydantic import BaseModel

_SCALARS = {str: "str", int: "int", float: "float", Decimal: "decimal", bool: "bool"}
# in the order pydantic checks them (a NaN fails the first)
_BOUNDS = (
    ("le", annotated_types.Le),
    ("lt", annotated_types.Lt),
    ("ge", annotated_types.Ge),
    ("gt", annotated_types.Gt),
)


def config_shapes(root: type[BaseModel]) -> dict[str, Any]:
    """``{"root": <shape of root>, "models": {name: [[field, shape, required], ...]}, "rules": [...]}``;
    ``rules``: the sections (``Target``) and fields (``Target.base_url``) with a validator of their
    own, which the chart restates as ``gw.rule.<name>`` and runs where pydantic runs it: a field's
    once its value is of the right shape, a section's once all its fields are."""
    models: dict[str, list[list[Any]]] = {}
    shape = _shape(root, [], models)
    return {"root": shape, "models": models, "rules": sorted(_rules(root, set(models)))}


def _rules(root: type[BaseModel], names: set[str]) -> set[str]:
    found: set[str] = set()
    for model in _sections(root):
        if model.__name__ not in names:
            continue
        decorators = model.__pydantic_decorators__
        found |= {f"{model.__name__}.{f}" for d in decorators.field_validators.values() for f in d.info.fields}
        found |= {model.__name__} if decorators.model_validators else set()
    return found


def _sections(model: type[BaseModel]) -> list[type[BaseModel]]:
    """``model`` and every model its fields name, however deep."""
    out, todo = [], [model]
    while todo:
        m = todo.pop()
        if m in out:
            continue
        out.append(m)
        for field in m.model_fields.values():
            todo += [t for t in _types(field.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    return out


def _types(annotation: Any) -> list[Any]:
    return [annotation, *(t for a in typing.get_args(annotation) for t in _types(a))]


def _shape(annotation: Any, metadata: list[Any], models: dict[str, list[list[Any]]]) -> dict[str, Any]:
    """The shape of ``annotation`` with the constraints in ``metadata`` (a field's, or ``Annotated``'s)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        inner = [m for a in args[1:] for m in (a.metadata if isinstance(a, pydantic.fields.FieldInfo) else [a])]
        return _shape(args[0], [*metadata, *inner], models)
    if origin in (typing.Union, types.UnionType):
        real = [_shape(a, metadata, models) for a in args if a is not type(None)]
        one = real[0] if len(real) == 1 else {"t": "union", "of": real}
        return one if len(real) == len(args) else {"t": "null", "of": one}
    if origin is Literal:
        return {"t": "lit", "of": list(args), "msg": _literal_message(annotation)}
    if origin is tuple:
        return {"t": "list", "item": _shape(args[0], [], models), **_lengths(metadata)}
    if origin is dict:
        return {"t": "dict", "key": _shape(args[0], [], models), "value": _shape(args[1], [], models)}
    if annotation is Any:
        return {"t": "any"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation.__name__ not in models:
            models[annotation.__name__] = []  # before its fields: a model may hold itself
            models[annotation.__name__] = [
                [name, _shape(f.annotation, f.metadata, models), f.is_required()]
                for name, f in annotation.model_fields.items()
            ]
        return {"t": "model", "ref": annotation.__name__}
    kind = _SCALARS[annotation]
    if kind == "str":
        return {"t": kind, **_lengths(metadata)}
    bounds = [[op, b, str(b)] for op, cls in _BOUNDS for m in metadata if isinstance(m, cls) for b in [getattr(m, op)]]
    return {"t": kind, "bounds": bounds} if bounds else {"t": kind}


def _lengths(metadata: list[Any]) -> dict[str, int]:
    out = {}
    for m in metadata:
        if isinstance(m, annotated_types.MinLen):
            out["min"] = m.min_length
        if isinstance(m, annotated_types.MaxLen):
            out["max"] = m.max_length
    return out


def _literal_message(annotation: Any) -> str:
    """pydantic's own words for a value not among the choices, as check-config prints them."""
    try:
        pydantic.TypeAdapter(annotation).validate_python(object())
    except pydantic.ValidationError as exc:
        return str(exc.errors()[0]["msg"]).replace("Input should be", "must be", 1)
    raise AssertionError(f"{annotation} takes any value")

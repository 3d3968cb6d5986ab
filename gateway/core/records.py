"""``record``: the frozen, slotted dataclass of the values every request makes (the internal request,
its sampling, stream events, usage, calls), built at the speed of a plain one.

A ``dataclass(frozen=True)`` sets each field in ``__init__`` through ``object.__setattr__``, about ten
times slower than a plain attribute store, paid several times per request and once per chunk of a
decoded stream. A record is frozen where it is checked, by the type checker (``mypy --strict`` refuses
any assignment to a field), and built with plain stores at run time. It hashes and compares by value,
as a frozen dataclass does. Copies with changes are ``dataclasses.replace``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    return dataclass(slots=True, unsafe_hash=True)(cls)

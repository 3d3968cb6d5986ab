"""Anthropic's Models API as the gateway answers it (``GET /v1/models`` and ``GET /v1/models/{model_id}``,
anthropic SDK 2.14.0's ``models.list`` and ``models.retrieve``): a model's card, and the list in
Anthropic's cursor pages (``limit`` 1..1000, 20 by default; ``after_id`` or ``before_id``; answered with
``has_more``, ``first_id``, ``last_id``, which the SDK's ``SyncPage`` follows). Every model the gateway
serves is ``active``: a ``lifecycle`` filter (the SDK sends ``lifecycle[]=...``) without it lists none.

Pure functions over the names the web layer found visible to the caller; which names those are, and
in what order, is decided there, not here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import InvalidRequest

JSON = Any
DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
PARAMS = ("limit", "after_id", "before_id")
LIFECYCLE = ("lifecycle", "lifecycle[]")  # the SDK's "brackets" array format, or one plain value
STAGES = frozenset({"active", "deprecated", "retired"})


@dataclass(frozen=True, slots=True)
class PageQuery:
    limit: int = DEFAULT_LIMIT
    after_id: str | None = None
    before_id: str | None = None
    active: bool = True  # whether active models are asked for (no ``lifecycle`` filter: they are)


def page_query(items: Iterable[tuple[str, str]]) -> PageQuery:
    """The list's query string, checked: a bad or repeated value is a 400 naming its parameter. Other
    parameters (the SDK's ``lifecycle``, a client's own) are ignored, as Anthropic's API ignores them."""
    seen: dict[str, str] = {}
    stages: set[str] = set()
    for name, value in items:
        if name in LIFECYCLE:
            stages |= _stages(value)
        if name not in PARAMS:
            continue
        if name in seen:
            raise InvalidRequest(f"{name}: given more than once", param=name)
        seen[name] = value
    after, before = seen.get("after_id"), seen.get("before_id")
    for name, cursor in (("after_id", after), ("before_id", before)):
        if cursor == "":
            raise InvalidRequest(f"{name}: a model id is required", param=name)
    if after is not None and before is not None:
        raise InvalidRequest("before_id: give after_id or before_id, not both", param="before_id")
    return PageQuery(_limit(seen.get("limit")), after, before, not stages or "active" in stages)


def _stages(value: str) -> set[str]:
    got = set(value.split(","))
    if not got <= STAGES:
        known = ", ".join(sorted(STAGES))
        raise InvalidRequest(f"lifecycle: Input should be one of {known}, got {value!r}", param="lifecycle")
    return got


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:
        raise InvalidRequest(f"limit: Input should be an integer from 1 to {MAX_LIMIT}, got {raw!r}", param="limit")
    return int(raw)


def page(names: Sequence[str], query: PageQuery) -> tuple[Sequence[str], bool]:
    """The page ``query`` asks for, in the list's order, and whether more lie beyond it in the
    direction it was asked (after its last id, or before its first for ``before_id``)."""
    if query.before_id is not None:
        end = _position(names, query.before_id, "before_id")
        start = max(0, end - query.limit)
        return names[start:end], start > 0
    start = 0 if query.after_id is None else _position(names, query.after_id, "after_id") + 1
    end = start + query.limit
    return names[start:end], end < len(names)


def _position(names: Sequence[str], cursor: str, param: str) -> int:
    try:
        return names.index(cursor)
    except ValueError:
        raise InvalidRequest(f"{param}: no model {cursor!r} in this list", param=param) from None


def model_card(name: str, created: str) -> dict[str, JSON]:
    """One model as ``ModelInfo``: the gateway's name is its id and its display name."""
    return {"type": "model", "id": name, "display_name": name, "created_at": created, "lifecycle": "active"}


def model_list(names: Sequence[str], created: str, query: PageQuery) -> dict[str, JSON]:
    """One page of the list, as Anthropic's ``GET /v1/models`` answers it."""
    chosen, more = page(names, query) if query.active else ((), False)
    return {
        "data": [model_card(n, created) for n in chosen],
        "has_more": more,
        "first_id": chosen[0] if chosen else None,
        "last_id": chosen[-1] if chosen else None,
    }


def created_at(now: int) -> str:
    """A card's ``created_at``: RFC 3339 in UTC, as Anthropic writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


class Shapes:
    """Anthropic's list holds models' ids, not their aliases; its retrieve takes an alias and answers
    with the model's id (``canonical``)."""

    def listing(
        self, names: Sequence[str], canonical: Callable[[str], str], now: int, query: Iterable[tuple[str, str]]
    ) -> dict[str, JSON]:
        pages = page_query(query)
        return model_list([n for n in names if canonical(n) == n], created_at(now), pages)

    def card(self, name: str, canonical: Callable[[str], str], now: int) -> dict[str, JSON]:
        return model_card(canonical(name), created_at(now))


SHAPES = Shapes()

"""ADMIT's argument (``scripts``), packed from a template per team key and budget window: the JSON of a
plan's checks is the same for every request of a team key but for its token estimate, its worst-case
cost and its lease, so those three are filled into bytes built once. Through ``store._args``'s generic
walk (a list per check, ``Plan.budget`` per budget, ``to_json``) the argument cost ~34k instructions an
admission with five checks (callgrind, docs/performance.md); ``tests/unit/test_admit_argv.py`` holds
the template's bytes to the walk's.

Not here: settlements' and give-backs' arguments (``store``), which list many leases and are built once
per batch, not per request."""

from __future__ import annotations

from dataclasses import dataclass

import pydantic_core

from gateway.limits.budget_rules import Window
from gateway.limits.plan import Check, Layout, Plan

MAX_TEMPLATES = 10_000  # team keys' templates kept (one per layout and window; old generations' go)


def _lit(value: object) -> bytes:
    """``value`` as JSON, ready to sit in a %-format (its ``%`` doubled)."""
    return pydantic_core.to_json(value).replace(b"%", b"%%")


def _check(check: Check, window: Window | None) -> bytes:
    """One check's element, with ``%(e)d`` (estimate), ``%(c)d`` (cost) and ``%(l)s`` (lease) for
    what varies by request, as ``Plan.param`` and ``Plan.budget`` write it."""
    if check.kind == "rpm":
        return _lit([check.kind, check.limit, check.burst])
    if check.kind == "tpm":
        return b'["tpm",%d,"%%(e)d"]' % check.limit
    if check.kind == "conc":
        return b'["conc",%d,"%%(l)s"]' % check.limit
    rule = check.rule
    assert rule is not None and window is not None
    money = rule.unit == "m"
    want = b"%(c)d" if money else b"%(e)d"
    middle = _lit([window.fields, window.add, int(rule.soft), window.oldest, window.ttl, int(money)])[1:-1]
    held = b'"%(l)s|' + _lit(window.add)[1:-1] + b"|" + want + b'"'
    return b'["bud",%d,' % check.limit + want + b"," + middle + b"," + held + b"]"


@dataclass(frozen=True, slots=True)
class Template:
    layout: Layout
    windows: tuple[Window | None, ...]
    head: bytes  # the checks' elements, then a comma: the extra arguments follow
    money: bool  # a money budget applies: its worst case must hold a reservation (above 0)
    tokens: bool  # a token budget applies: so must the token estimate

    def fill(self, plan: Plan, extra: tuple[int, ...]) -> bytes:
        tail = b",".join([b"%d" % x for x in extra]) + b"]"
        values = {b"e": plan.estimate, b"c": plan.cost_estimate, b"l": plan.lease.encode()}
        return self.head % values + tail


def template(layout: Layout, windows: tuple[Window | None, ...]) -> Template:
    parts = [_check(c, windows[i] if windows else None) for i, c in enumerate(layout.checks)]
    units = {c.rule.unit for c in layout.checks if c.rule is not None}
    return Template(layout, windows, b"[" + b"".join([p + b"," for p in parts]), "m" in units, "t" in units)


class Templates:
    """Per team key (its layout, by identity) and budget window, the template its admissions fill."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[int, Template] = {}

    def args(self, plan: Plan, *extra: int) -> bytes | None:
        """ADMIT's argument for ``plan`` followed by ``extra``; None where a template would differ from
        the generic walk (a budget's worst case of 0 holds no reservation: ``Plan.held`` writes "")."""
        layout = plan.layout
        known = self._known.get(id(layout))
        if known is None or known.layout is not layout or known.windows is not plan.windows:
            if len(self._known) >= MAX_TEMPLATES:
                self._known.clear()
            known = self._known[id(layout)] = template(layout, plan.windows)
        if (known.money and plan.cost_estimate <= 0) or (known.tokens and plan.estimate <= 0):
            return None
        return known.fill(plan, extra)

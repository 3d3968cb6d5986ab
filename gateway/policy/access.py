"""Which models a team may use: the ``models`` allow-list of each team in the config.

A model's aliases are the model: a team allowed ``tiny`` may ask for it as ``meta/tiny`` too, as
``/v1/models`` lists both. Not here: rate limits and budgets (``gateway.limits``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.core.errors import PermissionDenied
from gateway.policy.auth import Principal


class ModelAccess:
    __slots__ = ("_allowed", "_canonical")

    def __init__(self, allowed: Mapping[str, Iterable[str] | None], aliases: Mapping[str, str]) -> None:
        """``allowed``: team → public model names (None: every model); ``aliases``: alias → its model."""
        self._canonical = dict(aliases)
        self._allowed = {
            team: None if names is None else frozenset(self._canonical.get(n, n) for n in names)
            for team, names in allowed.items()
        }

    def teams(self) -> frozenset[str]:
        return frozenset(self._allowed)

    def allows(self, principal: Principal, model: str) -> bool:
        """Whether the principal's team may use ``model``: what the model list shows it."""
        allowed = self._allowed.get(principal.team)
        return allowed is None or self._canonical.get(model, model) in allowed

    def check(self, principal: Principal, model: str) -> None:
        """Raise ``PermissionDenied`` (naming the field) unless the principal's team may use ``model``."""
        if not self.allows(principal, model):
            raise PermissionDenied(f"team {principal.team!r} may not use model {model!r}", param="model")

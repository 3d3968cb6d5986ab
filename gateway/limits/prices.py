"""The price table: what a request costs on the target that answered it, and the most it may cost on
any target of its route (what admission reserves against a money budget). Costs are integer
millionths of the configured currency, rounded up per request, so sums in Redis stay exact.

One table for the whole config (prices are reloaded as one piece). A model or target with no price is
not counted: said once in the log and listed on ``/status`` (``unpriced``), never charged as free
without a word."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from decimal import Decimal

from gateway.runtime.spend import Price, SpendSettings
from gateway.runtime.throttle import LogThrottle

log = logging.getLogger("gateway.limits")
MAX_UNPRICED = 10_000  # (model, target) pairs remembered as said
throttled = LogThrottle(log)  # lines a request can cause: one a period per kind


@dataclass(frozen=True, slots=True)
class Rate:
    """One price, per token in millionths of the currency (a price per million tokens is exactly that)."""

    input: Decimal
    cached_input: Decimal
    output: Decimal

    @classmethod
    def of(cls, price: Price) -> Rate:
        cached = price.cached_input if price.cached_input is not None else price.input
        return cls(price.input, cached, price.output)

    def cost(self, prompt: int, cached: int, completion: int) -> int:
        """Millionths of the currency, rounded up. ``cached``: of the prompt tokens, those served from
        the upstream's cache (clamped to the prompt)."""
        cached = max(0, min(cached, prompt))
        exact = (prompt - cached) * self.input + cached * self.cached_input + completion * self.output
        return math.ceil(exact)


@dataclass(slots=True)
class PriceTable:
    currency: str = "USD"
    rates: dict[tuple[str, str | None], Rate] = field(default_factory=dict)
    unpriced: set[tuple[str, str]] = field(default_factory=set)  # seen without a price (for /status)
    _worst: dict[tuple[str, tuple[str, ...]], Rate | None] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: SpendSettings) -> PriceTable:
        return cls(settings.currency, {(p.model, p.target): Rate.of(p) for p in settings.prices})

    def __bool__(self) -> bool:
        return bool(self.rates)

    def rate(self, model: str, target: str) -> Rate | None:
        """The target's own price, else the model's; None (said once) when neither is configured."""
        found = self.rates.get((model, target)) or self.rates.get((model, None))
        if found is None and (model, target) not in self.unpriced:
            if len(self.unpriced) >= MAX_UNPRICED:  # a catch-all's model names are the clients' choice
                self.unpriced.clear()
            self.unpriced.add((model, target))
            what = "no price for model %r on target %r: its spend is not counted"
            throttled.warning(f"no-price:{target}", what, model, target)
        return found

    def worst(self, model: str, targets: tuple[str, ...]) -> Rate | None:
        """The highest of each price kind over the route's targets (a fallback may cost more), the
        priced ones only; None when none is priced."""
        key = (model, targets)
        if key in self._worst:
            return self._worst[key]
        known = [r for r in (self.rate(model, t) for t in targets) if r is not None]
        worst = (
            Rate(max(r.input for r in known), max(r.cached_input for r in known), max(r.output for r in known))
            if known
            else None
        )
        self._worst[key] = worst
        return worst

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

from gateway.runtime.spend_config import Price, SpendSettings
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
    cache_write: Decimal | None = None  # None: the input price
    embedding: Decimal | None = None  # an embeddings request's input tokens; None: the input price
    # the prices as integers over a power of ten (``_in_integers``), worked out once
    scaled: tuple[int, int, int, int, int] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scaled", _in_integers(self))

    @classmethod
    def of(cls, price: Price) -> Rate:
        return cls(price.input, price.read, price.output, price.cache_write, price.embedding)

    def for_embeddings(self) -> Rate:
        """The rate an embeddings request is charged: every input token at the embedding price (no
        prompt cache, no output tokens)."""
        each = self.input if self.embedding is None else self.embedding
        return Rate(each, each, Decimal(0))

    def cost(self, prompt: int, cached: int, completion: int, written: int = 0) -> int:
        """Millionths of the currency, rounded up. ``cached``, ``written``: of the prompt tokens, those
        served from the upstream's cache and those written to it (clamped to the prompt)."""
        cached = max(0, min(cached, prompt))
        written = max(0, min(written, prompt - cached))
        scaled = self.scaled
        if scaled is not None:  # in integers: the same sum, exactly, without a Decimal per step
            each, read, write, out, per = scaled
            exact = (prompt - cached - written) * each + cached * read + written * write + completion * out
            return -(-exact // per)
        write_price = self.input if self.cache_write is None else self.cache_write
        whole = (prompt - cached - written) * self.input + cached * self.cached_input + written * write_price
        return math.ceil(whole + completion * self.output)

    def worst(self, prompt: int, completion: int) -> int:
        """The most ``prompt`` and ``completion`` tokens can cost, however the target serves the prompt
        (fresh, read from its cache or written to it: a write may cost more than a fresh token,
        Anthropic's 1.25 times): what a budget reserves. Millionths, rounded up."""
        scaled = self.scaled
        if scaled is not None:
            each, read, write, out, per = scaled
            return -(-(prompt * max(each, read, write) + completion * out) // per)
        return max(
            self.cost(prompt, 0, completion),
            self.cost(prompt, prompt, completion),
            self.cost(prompt, 0, completion, prompt),
        )


def _in_integers(rate: Rate) -> tuple[int, int, int, int, int] | None:
    """The input, cached input, cache write and output prices as integers over one power of ten
    (the last element), so a cost is summed in integers; None where a price has too many digits
    for that to be exact (then Decimal sums it)."""
    prices = (rate.input, rate.cached_input, rate.input if rate.cache_write is None else rate.cache_write, rate.output)
    if not all(p.is_finite() for p in prices):
        return None
    places = max(0, *(-int(p.as_tuple().exponent) for p in prices))
    per = 10**places
    scaled = [p.scaleb(places) for p in prices]
    if places > 18 or any(v != v.to_integral_value() for v in scaled):
        return None
    each, read, write, out = (int(v) for v in scaled)
    return each, read, write, out, per


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
            Rate(
                max(r.input for r in known),
                max(r.cached_input for r in known),
                max(r.output for r in known),
                # the dearest write, where any target prices writes apart (else: the input price)
                max(r.input if r.cache_write is None else r.cache_write for r in known)
                if any(r.cache_write is not None for r in known)
                else None,
                max(r.input if r.embedding is None else r.embedding for r in known)
                if any(r.embedding is not None for r in known)
                else None,
            )
            if known
            else None
        )
        self._worst[key] = worst
        return worst

"""The config file's spend section and team budgets (``gateway.runtime.config`` includes them): one
price table (per model and target, per million tokens, in the currency it names) and the budgets a
team and each of its keys are held to. What the prices cost and how budgets are kept is in
``gateway.limits.prices`` and ``gateway.limits.budget_rules``; nothing here computes."""

from __future__ import annotations

import zoneinfo
from collections.abc import Sequence
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MICROS = 1_000_000  # money is kept in integer millionths of the currency: exact, never a float sum


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(_Model):
    """What one model costs on one target (or on any target of it, with no ``target``), per million
    tokens: prompt tokens, the prompt tokens the upstream served from its cache (``cache_read``, once
    ``cached_input``) and
    those it wrote to its cache (``cache_write``), completion tokens; and the input tokens of an embeddings
    request (``embedding``: an embedding model's own rate, which has no output tokens)."""

    model: str  # the public model name, as under ``models``
    target: str | None = None  # a target's name (``provider:model`` unless it names itself)
    input: Annotated[Decimal, Field(ge=0)]
    cache_read: Annotated[Decimal, Field(ge=0)] | None = None  # prompt-cache reads; default: the input price
    cached_input: Annotated[Decimal, Field(ge=0)] | None = None  # cache_read's earlier name, still taken
    cache_write: Annotated[Decimal, Field(ge=0)] | None = None  # prompt-cache writes (Anthropic's); default: input
    output: Annotated[Decimal, Field(ge=0)]
    embedding: Annotated[Decimal, Field(ge=0)] | None = None  # embeddings' input tokens; default: input

    @model_validator(mode="after")
    def _one_read_price(self) -> Price:
        if self.cache_read is not None and self.cached_input is not None:
            raise ValueError("give 'cache_read' or its earlier name 'cached_input', not both")
        return self

    @property
    def read(self) -> Decimal:
        """The price of a prompt token read from the upstream's cache."""
        given = self.cache_read if self.cache_read is not None else self.cached_input
        return self.input if given is None else given

    @property
    def write(self) -> Decimal:
        """The price of a prompt token written to the upstream's cache."""
        return self.input if self.cache_write is None else self.cache_write


class SpendSettings(_Model):
    currency: Annotated[str, Field(min_length=1, max_length=8)] = "USD"
    time_zone: str = "UTC"  # where day, week (from Monday) and month budgets begin and end
    # while Redis is unreachable: "closed" refuses requests of teams with a budget (503); "open"
    # admits them on this process's share of each budget (budget / limits.replicas)
    on_failure: Literal["open", "closed"] = "closed"
    prices: tuple[Price, ...] = ()

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as Europe/Paris)") from None
        return value

    @model_validator(mode="after")
    def _once(self) -> SpendSettings:
        seen: set[tuple[str, str | None]] = set()
        for p in self.prices:
            if (p.model, p.target) in seen:
                raise ValueError(f"prices: model {p.model!r} target {p.target!r} is priced twice")
            seen.add((p.model, p.target))
        return self


class Budget(_Model):
    """An amount of money and/or tokens per period; ``soft``: exceeding it is logged, counted and
    marked on the answer (``X-Budget-Exceeded``), never refused."""

    amount: Annotated[Decimal, Field(gt=0)] | None = None  # in the spend section's currency
    tokens: Annotated[int, Field(gt=0)] | None = None  # prompt + completion tokens
    period: Literal["day", "week", "month", "rolling"] = "month"
    window_seconds: Annotated[int, Field(ge=60)] | None = None  # the rolling window's length
    mode: Literal["hard", "soft"] = "hard"

    @model_validator(mode="after")
    def _shape(self) -> Budget:
        if self.amount is None and self.tokens is None:
            raise ValueError("give 'amount', 'tokens' or both")
        if self.amount is not None and (self.amount * MICROS) % 1:
            raise ValueError("'amount' is kept in millionths of the currency: at most 6 decimals")
        if (self.period == "rolling") != (self.window_seconds is not None):
            raise ValueError("'window_seconds' is given with period: rolling, and only then")
        return self


def price_problem(
    prices: Sequence[Price], targets: dict[str, set[str]], aliases: dict[str, str], wildcards: set[str]
) -> str | None:
    """Why a price could never apply, in the config's words: prices are looked up by a route's model
    label (a configured name, ``<vendor>/*``, or ``local`` for the catch-all) and a target's name, so
    a price naming an alias, an unknown model or another model's target would leave that model
    unpriced without a word. ``targets`` maps each model to its target names, ``aliases`` each alias to
    its model."""
    for i, price in enumerate(prices):
        where = f"spend.prices[{i}]"
        if price.model in aliases:
            return f"{where}.model: {price.model!r} is an alias: price the model's name, {aliases[price.model]!r}"
        if price.model in targets:
            if price.target is not None and price.target not in targets[price.model]:
                known = ", ".join(sorted(targets[price.model]))
                return f"{where}.target: model {price.model!r} has no target {price.target!r} (its targets: {known})"
        elif price.model not in wildcards:
            known = ", ".join([*targets, *sorted(wildcards)])
            return f"{where}.model: unknown model {price.model!r} (known: {known})"
    return None

"""What ``check-config`` prints of the limits, budgets and prices a config resolves to: the defaults
filled in (a burst is the rate unless given), every team's ceilings, and the price each target of
each model will be charged at (its own, else the model's, else none: not counted)."""

from __future__ import annotations

from gateway.runtime.config import GatewayConfig, Limits, Team
from gateway.runtime.spend_config import Budget, Price


def _limits(limits: Limits) -> str:
    parts = []
    if limits.rpm is not None:
        parts.append(f"rpm {limits.rpm} (burst {limits.rpm_burst or limits.rpm})")
    if limits.tpm is not None:
        parts.append(f"tpm {limits.tpm}")
    if limits.concurrency is not None:
        parts.append(f"concurrency {limits.concurrency}")
    return ", ".join(parts) or "none"


def _budget(budget: Budget | None, currency: str) -> str:
    if budget is None:
        return "none"
    amounts = [f"{budget.amount} {currency}"] if budget.amount is not None else []
    amounts += [f"{budget.tokens} tokens"] if budget.tokens is not None else []
    period = f"rolling {budget.window_seconds} s" if budget.period == "rolling" else f"per {budget.period}"
    return f"{' and '.join(amounts)} {period} ({budget.mode})"


def team_lines(team: Team, currency: str) -> list[str]:
    models = ", ".join(team.models) if team.models is not None else "all"
    head = f"  team {team.id}: models {models}"
    if team.deadline is not None:
        head += f"; deadline {team.deadline:g} s"
    if team.ttft is not None:
        head += f"; ttft ceiling {team.ttft:g} s"
    return [
        head,
        f"    limits: team {_limits(team.limits)}; each key {_limits(team.key_limits)}",
        f"    budget: team {_budget(team.budget, currency)}; each key {_budget(team.key_budget, currency)}",
    ]


def _price(price: Price | None, currency: str) -> str:
    if price is None:
        return "unpriced (spend not counted)"
    return (
        f"input {price.input}, cache read {price.read}, cache write {price.write}, output {price.output} "
        f"{currency} per 1M tokens{'' if price.target else ' (the model price)'}"
    )


def price_lines(config: GatewayConfig) -> list[str]:
    """Each configured target's price, looked up as the price table does (``gateway/limits/prices.py``):
    the target's own, else the model's."""
    spend = config.spend
    table = {(p.model, p.target): p for p in spend.prices}
    lines = []
    for entry in config.models:
        for t in entry.targets:
            name = t.name or f"{t.provider}:{t.model or entry.name}"
            price = table.get((entry.name, name)) or table.get((entry.name, None))
            lines.append(f"  {entry.name} on {name}: {_price(price, spend.currency)}")
    wildcard = [p for p in spend.prices if p.model not in {m.name for m in config.models}]
    lines += [f"  {p.model} on {p.target or 'any target'}: {_price(p, spend.currency)}" for p in wildcard]
    return lines


def report(config: GatewayConfig) -> list[str]:
    """The lines ``check-config`` prints after the routes and keys."""
    shared = "in Redis, across gateway replicas" if config.redis is not None else "in this process"
    head = f"limits and budgets (kept {shared}; budgets in {config.spend.currency}, {config.spend.time_zone}):"
    teams = [line for team in config.teams for line in team_lines(team, config.spend.currency)]
    return [head, *(teams or ["  no teams"]), "prices:", *(price_lines(config) or ["  no models"])]

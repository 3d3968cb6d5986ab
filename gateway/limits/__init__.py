"""Limits and admission: requests, tokens and concurrency per team and per key, exact across replicas
through one atomic Redis script per admission, with an in-process twin for the embedded default and
for Redis outages (see ``failover.py`` for the failure policy)."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from gateway.limits.admission import Admission, Policies, Settings, TeamPolicy
from gateway.limits.budget_rules import rules
from gateway.limits.costs import Spend
from gateway.limits.failover import FailoverLimiter
from gateway.limits.limiter import Limiter
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import LimitValues
from gateway.limits.prices import PriceTable
from gateway.limits.store import RedisLimiter
from gateway.runtime.config import GatewayConfig, Limits

KIND = {"rpm": "rpm", "tpm": "tpm", "concurrency": "conc"}


def values(limits: Limits) -> LimitValues:
    return LimitValues(limits.rpm, limits.rpm_burst, limits.tpm, limits.concurrency)


def build_admission(config: GatewayConfig, client: Any) -> Admission:
    limiter: Limiter
    if client is None or config.redis is None:
        limiter = LocalLimiter()
    else:
        policy = {KIND[k]: v for k, v in config.redis.on_failure.items()} | {"bud": config.spend.on_failure}
        limiter = FailoverLimiter(
            RedisLimiter(client, advance=config.limits.advance),
            LocalLimiter(divisor=config.limits.replicas),
            policy,
            retry_seconds=config.redis.retry_seconds,
        )
    s = config.limits
    settings = Settings(s.admission_timeout, s.max_waiters, s.lease_ttl)
    return Admission(limiter, team_policies(config).teams, settings, Spend(PriceTable.of(config.spend)))


def team_policies(config: GatewayConfig) -> Policies:
    """The teams' limits and deadlines, and the prices, of one config (a reload builds the next generation's)."""
    spend = config.spend
    zone = ZoneInfo(spend.time_zone)
    return Policies(
        {
            t.id: TeamPolicy(
                values(t.limits),
                values(t.key_limits),
                t.deadline,
                tuple(rules(t.budget, zone, spend.currency)),
                tuple(rules(t.key_budget, zone, spend.currency)),
                t.ttft,
            )
            for t in config.teams
        },
        PriceTable.of(spend),
    )


__all__ = ["Admission", "Policies", "build_admission", "team_policies"]

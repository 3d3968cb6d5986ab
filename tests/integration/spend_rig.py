"""What the spend tests share (``test_spend``, ``test_spend_cut_streams``, ``test_spend_admission`` and
the budget tests beside them): one price, a config with a priced and an unpriced model, a gateway in
front of a fake upstream under a fresh team id, an admission with a budget over Redis and the process
when Redis is out, and the team's usage and budget read back from Redis once settled."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any, cast
from zoneinfo import ZoneInfo

import redis.asyncio as aioredis

from gateway.core.request import InternalRequest
from gateway.core.upstream import Upstream
from gateway.limits.admission import Admission, Ask, Settings, TeamPolicy
from gateway.limits.budget_rules import rules
from gateway.limits.costs import Spend
from gateway.limits.failover import FailoverLimiter
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import LimitValues, tag
from gateway.limits.prices import PriceTable
from gateway.limits.store import RedisLimiter
from gateway.runtime.config import RedisConfig, hash_key, parse_config
from gateway.runtime.spend_config import Budget, Price, SpendSettings
from gateway.store.redis_client import redis_client
from tests.integration.conftest import GatewayFactory, target
from tests.integration.dialect_clients import BY_NAME, KEY
from tests.support import eventually

OPENAI = BY_NAME["openai"]
ADMIN = "admin-key-for-spend"
ZONE = "Europe/Paris"
IN, OUT = 10, 30  # prices per million tokens: 10 and 30 millionths of a EUR per token
LOCAL_JSON = ("--host", "127.0.0.1", "--log-format", "json")  # a served gateway's, read back from its log
PROMPTS = ["alpha beta gamma", "count these words please", "one two three four five six", "spend"]


def spend_config(
    server: Any, redis_url: str | None, team: str, cluster: bool = False, **team_cfg: Any
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "models": [
            {"name": "m", "targets": [target(server, "openai", name="up")]},
            {"name": "free", "targets": [target(server, "openai", name="free-up")]},  # no price
        ],
        "teams": [{"id": team, "keys": [{"id": "k1", "sha256": hash_key(KEY)}], **team_cfg}],
        "spend": {"currency": "EUR", "time_zone": ZONE, "prices": [{"model": "m", "input": IN, "output": OUT}]},
        "admin": {"key_sha256": hash_key(ADMIN)},
    }
    if redis_url is not None:
        data["redis"] = {"url": redis_url, "timeout_ms": 1000, "cluster": cluster}
    return data


def cost(prompt: int, completion: int) -> int:
    return prompt * IN + completion * OUT


async def settled(url: str, team: str, requests: int) -> dict[str, int]:
    """The team's usage hash once ``requests`` requests are settled in it (settling follows the answer)."""
    client = aioredis.Redis.from_url(url)

    async def usage() -> dict[str, int]:
        fields: dict[str, int] = {}
        async for key in client.scan_iter(match=f"{tag(team)}:usage:*"):
            for k, v in (await client.hgetall(key)).items():
                fields[k.decode()] = fields.get(k.decode(), 0) + int(v)
        return fields if fields.get("requests", 0) >= requests else {}

    try:
        return await eventually(usage, f"{requests} requests settled in team {team}'s usage")
    finally:
        await client.aclose()


async def budget_spent(url: str, team: str, unit: str = "m") -> int:
    async with contextlib.aclosing(aioredis.Redis.from_url(url)) as client:
        fields = {k.decode(): int(v) for k, v in (await client.hgetall(f"{tag(team)}:budget")).items()}
    return sum(v for k, v in fields.items() if k.endswith(f":{unit}"))


async def spend_gateway(
    gateway: GatewayFactory, upstream: Any, redis_url: str | None, cluster: bool = False, **team_cfg: Any
) -> Any:
    """A fake upstream, a fresh team id (fresh budgets in a shared Redis) and a gateway in front."""
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    return server, team, await gateway(parse_config(spend_config(server, redis_url, team, cluster, **team_cfg)))


class Target:
    """What admission reads of a route's target: its name (the price's key)."""

    name = "up"


def team_ask(request: InternalRequest) -> Ask:
    """Team ``a``'s key ``k1`` asking for ``request`` on model ``m`` at target ``up``."""
    return Ask("a", "k1", request, model="m", targets=cast("list[Upstream]", [Target()]))


@contextlib.asynccontextmanager
async def outage_admission(
    url: str, on_failure: str, amount: Decimal = Decimal(1), limits: LimitValues | None = None
) -> AsyncIterator[tuple[Admission, FailoverLimiter]]:
    """Team ``a``'s admission with a money budget in the Redis at ``url``, failing ``on_failure``
    while it is out; its limiter and Redis client closed at the end."""
    zone = ZoneInfo(ZONE)
    budget = tuple(rules(Budget(amount=amount), zone, "EUR"))
    teams = {"a": TeamPolicy(limits=limits or LimitValues(), budget=budget)}
    prices = PriceTable.of(SpendSettings(prices=(Price(model="m", input=Decimal(IN), output=Decimal(OUT)),)))
    client = redis_client(RedisConfig(url=url, timeout_ms=1000))
    limiter = FailoverLimiter(RedisLimiter(client), LocalLimiter(), {"bud": on_failure}, retry_seconds=0.5)
    try:
        yield Admission(limiter, teams, Settings(admission_timeout=0), Spend(prices)), limiter
    finally:
        await limiter.close()
        await client.aclose()

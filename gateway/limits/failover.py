"""The policy between Redis and this process when Redis fails.

Redis failure is a policy, not an accident: every call has a millisecond timeout; a failure opens a
breaker for ``retry_seconds`` (no request waits on a dead Redis meanwhile); per limit kind the config
says ``open`` (enforce per process, each replica taking ``limit / replicas``) or ``closed`` (refuse
with 503). ``gateway_redis_up`` and ``/ready`` say which is in force.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from gateway.limits.limiter import LimitsUnavailable, Refusal, Settlement
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import Plan
from gateway.limits.store import RedisLimiter
from gateway.obs.metrics import REDIS_STATE

log = logging.getLogger("gateway.limits")


# Anything a Redis call raises is an outage as far as limits go: a client-library bug must follow the
# failure policy too, never become a 500.
REDIS_FAILURES = (RedisError, OSError, TimeoutError, Exception)


@dataclass(slots=True)
class FailoverLimiter:
    """Redis first; on failure, each limit kind follows its policy until Redis answers again."""

    redis: RedisLimiter
    local: LocalLimiter
    policy: Mapping[str, str]  # kind (rpm|tpm|conc) → "open" | "closed"
    retry_seconds: float = 1.0
    down_until: float = 0.0
    via_local: set[str] = field(default_factory=set)  # leases admitted locally, settled locally

    @property
    def up(self) -> bool:
        return time.monotonic() >= self.down_until

    def _failed(self, exc: BaseException) -> None:
        if self.up:
            log.warning("redis unavailable (%s): limits follow the failure policy", type(exc).__name__)
        self.down_until = time.monotonic() + self.retry_seconds
        REDIS_STATE.n = 0

    async def admit(self, plan: Plan, lease_ttl_ms: int) -> Refusal | None:
        if self.up:
            try:
                result = await self.redis.admit(plan, lease_ttl_ms)
            except REDIS_FAILURES as exc:
                self._failed(exc)
            else:
                REDIS_STATE.n = 1
                return result
        closed = [c for c in plan.checks if self.policy.get(c.kind, "open") == "closed"]
        if closed:
            raise LimitsUnavailable(f"rate limits are unavailable ({closed[0].label} fails closed)")
        self.via_local.add(plan.lease)
        return await self.local.admit(plan, lease_ttl_ms)

    async def settle(self, items: list[Settlement], urgent: bool = False) -> None:
        local = [s for s in items if s.plan.lease in self.via_local]
        remote = [s for s in items if s.plan.lease not in self.via_local]
        for s in local:
            self.via_local.discard(s.plan.lease)
        await self.local.settle(local)
        if not remote:
            return
        try:
            await self.redis.settle(remote, urgent)
        except REDIS_FAILURES as exc:
            self._failed(exc)  # leases expire by their TTL; usage of these requests is not recorded
            log.warning("settling %d requests failed: their usage is not recorded", len(remote))

    async def renew(self, plans: list[Plan], lease_ttl_ms: int) -> None:
        remote = [p for p in plans if p.lease not in self.via_local]
        await self.local.renew([p for p in plans if p.lease in self.via_local], lease_ttl_ms)
        if remote and self.up:
            try:
                await self.redis.renew(remote, lease_ttl_ms)
            except REDIS_FAILURES as exc:
                self._failed(exc)

    async def usage(self, keys: list[str]) -> list[dict[str, int]]:
        try:
            return await self.redis.usage(keys)
        except REDIS_FAILURES as exc:
            self._failed(exc)
            raise LimitsUnavailable("usage is unavailable while Redis is down") from None

    async def close(self) -> None:
        await self.redis.close(give_back=self.up)

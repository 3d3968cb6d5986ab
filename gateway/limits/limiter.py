"""What the admission path calls a limiter: the interface every store implements (``store`` for Redis,
``local`` in process, ``failover`` between them), its results, and the error of no limits at all."""

from __future__ import annotations

from typing import Protocol

from gateway.core.errors import GatewayError
from gateway.core.records import record
from gateway.limits.plan import Check, Plan


class LimitsUnavailable(GatewayError):
    status = 503
    code = "limits_unavailable"
    retryable = True


@record
class Settlement:
    """Finished requests of one plan (or, with no limits to correct, of one team key and hour summed):
    the token correction (actual - estimate) and their usage."""

    plan: Plan
    correction: int
    prompt: int
    completion: int
    requests: int = 1


@record
class Refusal:
    check: Check
    retry_after: float | None  # seconds; None: the request can never fit this limit


class Limiter(Protocol):
    async def admit(self, plan: Plan, lease_ttl_ms: int) -> Refusal | None: ...

    async def settle(self, items: list[Settlement], urgent: bool = False) -> None:
        """Settle a batch of finished requests (one round trip for Redis). ``urgent``: requests here
        wait for the slots these free, so the round trip may not be put off."""
        ...

    async def renew(self, plans: list[Plan], lease_ttl_ms: int) -> None: ...

    async def usage(self, keys: list[str]) -> list[dict[str, int]]: ...

    async def close(self) -> None:
        """Give back what is held ahead of requests (``gateway.limits.advance``)."""
        ...

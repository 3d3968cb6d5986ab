"""The policy between Redis and this process when Redis fails.

Redis failure is a policy, not an accident: every call has a millisecond timeout; a failure opens a
breaker for ``retry_seconds`` (no request waits on a dead Redis meanwhile); per limit kind the config
says ``open`` (enforce per process, each replica taking ``limit / replicas``) or ``closed`` (refuse
with 503). ``gateway_redis_up`` and ``/ready`` say which is in force.

Only an outage opens the breaker: an error reply to one call's own arguments (``store.call_error``)
fails that call alone. Settlements Redis did not take are held (``backlog``) and sent with the next
batch once it answers, so finished requests' slots and usage come back with it (the usage of requests
admitted here meanwhile too). A settlement's call that went out and was not answered (a timeout, a
connection lost) may have run: it is kept whole and sent again as it was, alone, under its id, which
SETTLE applies once (``scripts.SETTLE``), for up to ``ONCE_HOLD_SECONDS``; only past that, or at
shutdown, is its usage given up as unknown. Requests admitted here meanwhile and still running when
Redis answers are added to it (``adopt``, before the next admission or renewal goes there), so its
limits and budgets count them until they end. An outage
is logged when it begins and ends, with a summary every ``SUMMARY_SECONDS`` while it lasts, never
per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from gateway.limits.backlog import Backlog, given_up, lease_only
from gateway.limits.limiter import LimitsUnavailable, Refusal, SettleCall, Settlement
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import Plan
from gateway.limits.scripts import ONCE_HOLD_SECONDS
from gateway.limits.store import Failed, RedisLimiter, call_error, unanswered
from gateway.obs.metrics import REDIS_STATE, USAGE_DROPPED, USAGE_UNKNOWN

log = logging.getLogger("gateway.limits")


# Anything a Redis call raises is an outage as far as limits go: a client-library bug must follow the
# failure policy too, never become a 500.
REDIS_FAILURES = (RedisError, OSError, TimeoutError, Exception)
SUMMARY_SECONDS = 30.0  # while Redis is down, one log line this often says what the policy did


@dataclass(slots=True)
class Outage:
    """What the failure policy did since Redis stopped answering: for its log lines."""

    since: float | None = None  # time.monotonic() of the first failure; None while Redis answers
    logged: float = 0.0  # the last line about it
    local: int = 0  # admissions by this process's limits
    refused: int = 0  # requests refused with 503
    call_errors: int = 0  # calls Redis refused for their arguments, since the last line about them

    def began(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = self.logged = time.monotonic()
            self.local = self.refused = 0
            log.warning("redis unavailable (%s: %s): limits follow the failure policy", type(exc).__name__, exc)

    def tick(self, held: int) -> None:
        now = time.monotonic()
        if self.since is not None and now - self.logged >= SUMMARY_SECONDS:
            self.logged = now
            log.warning(
                "redis unavailable for %.0f s: %d requests admitted by this process's limits, %d refused, "
                "%d settlements held",
                now - self.since,
                self.local,
                self.refused,
                held,
            )

    def ended(self, held: int) -> None:
        if self.since is not None:
            log.warning(
                "redis answers again after %.1f s: %d requests were admitted by this process's limits, "
                "%d refused; %d settlements were held for it",
                time.monotonic() - self.since,
                self.local,
                self.refused,
                held,
            )
            self.since = None

    def call_error(self, what: str, exc: BaseException) -> None:
        """Redis refused one call for its arguments: a bug of ours, logged at most once a summary period."""
        self.call_errors += 1
        now = time.monotonic()
        if self.call_errors == 1 or now - self.logged >= SUMMARY_SECONDS:
            self.logged = now
            log.error("redis refused %d %s call(s) for their arguments: %s", self.call_errors, what, exc)
            self.call_errors = 0


@dataclass(slots=True)
class FailoverLimiter:
    """Redis first; on failure, each limit kind follows its policy until Redis answers again."""

    redis: RedisLimiter
    local: LocalLimiter
    policy: Mapping[str, str]  # kind (rpm|tpm|conc|bud) → "open" | "closed"
    retry_seconds: float = 1.0
    down_until: float = 0.0
    via_local: set[str] = field(default_factory=set)  # leases admitted locally, settled locally
    to_adopt: dict[str, Plan] = field(default_factory=dict)  # of those, running and not yet in Redis
    backlog: Backlog = field(default_factory=Backlog)
    outage: Outage = field(default_factory=Outage)
    adoption: asyncio.Task[None] | None = None  # the adoption under way (``_adopting``)

    # Some rate or concurrency limit fails open: this process's share of it is enforced here during an
    # outage, so what Redis admits for this process is mirrored here (``LocalLimiter.record``).
    policy_open: bool = field(init=False)
    # Budgets fail open: this process's share is of what Redis last said was left (``record_spent``).
    budgets_open: bool = field(init=False)

    def __post_init__(self) -> None:
        self.policy_open = any(self.policy.get(kind, "open") == "open" for kind in ("rpm", "tpm", "conc"))
        self.budgets_open = self.policy.get("bud", "open") == "open"

    @property
    def up(self) -> bool:
        return time.monotonic() >= self.down_until

    def held(self) -> int:
        return len(self.backlog)

    def _failed(self, exc: BaseException) -> None:
        self.outage.began(exc)
        self.down_until = time.monotonic() + self.retry_seconds
        REDIS_STATE.n = 0

    def _answered(self, held: int | None = None) -> None:
        """Redis answered; ``held``: the settlements held for it (by default the backlog's, counted
        only when an outage ends, not per admission)."""
        if not self.up:
            # A call sent before the breaker opened answered while it is open: the policy is still
            # in force until ``down_until``, so the outage (its gauge, its line's counts) goes on.
            return
        REDIS_STATE.n = 1
        if self.outage.since is not None:
            self.outage.ended(len(self.backlog) if held is None else held)

    async def admit(self, plan: Plan, lease_ttl_ms: int) -> Refusal | None:
        up = self.up
        if up and self.to_adopt:
            await self._adopting(lease_ttl_ms)
            up = self.up
        if up:
            try:
                result = await self.redis.admit(plan, lease_ttl_ms)
            except REDIS_FAILURES as exc:
                if call_error(exc):  # this request alone follows the policy
                    self.outage.call_error("admission", exc)
                else:
                    self._failed(exc)
            else:
                self._answered()
                if result is None and self.policy_open:  # mirrored: a fail-open share must know it
                    self.local.record(plan, lease_ttl_ms)
                if result is None and self.budgets_open and plan.spent:
                    self.local.record_spent(plan)
                return result
        closed = [c for c in plan.checks if self.policy.get(c.kind, "open") == "closed"]
        outage = self.outage
        if closed:
            outage.refused += 1
            outage.tick(len(self.backlog))
            if closed[0].kind == "bud":
                raise LimitsUnavailable(
                    f"spend cannot be checked while Redis is unavailable ({closed[0].label} fails closed)"
                )
            raise LimitsUnavailable(f"rate limits are unavailable ({closed[0].label} fails closed)")
        outage.local += 1
        outage.tick(len(self.backlog))
        refusal = await self.local.admit(plan, lease_ttl_ms)
        if refusal is None:
            self.via_local.add(plan.lease)
            self.to_adopt[plan.lease] = plan
        return refusal

    async def _adopting(self, lease_ttl_ms: int) -> None:
        """``_adopt`` as this limiter's own task, awaited shielded: a request cancelled meanwhile (its
        client gone) would cut it after the list was taken, and the requests after the one out would
        never be adopted."""
        if self.adoption is None or self.adoption.done():
            self.adoption = asyncio.ensure_future(self._adopt(lease_ttl_ms))
        await asyncio.shield(self.adoption)

    async def _adopt(self, lease_ttl_ms: int) -> None:
        """Adds the requests admitted here during an outage and still running to Redis, each once:
        from then on they are renewed and settled there, as if Redis had admitted them. A call that
        failed before it was sent is tried again with the next; one that timed out may have run, so
        its request stays this process's (what it reserved in Redis lapses with its lease)."""
        plans, self.to_adopt = list(self.to_adopt.values()), {}
        for plan in plans:
            try:
                await self.redis.adopt(plan, lease_ttl_ms)
            except REDIS_FAILURES as exc:
                if call_error(exc):
                    self.outage.call_error("adoption", exc)
                    continue
                if not unanswered(exc):
                    self.to_adopt |= {p.lease: p for p in plans[plans.index(plan) :] if p.lease in self.via_local}
                self._failed(exc)
                return
            if plan.lease in self.via_local:
                self.via_local.discard(plan.lease)
                self.local.handed_over(plan, self.policy_open)
            else:  # it ended meanwhile, settled as this process's: what Redis holds for it is let go
                self.backlog.add(lease_only([Settlement(plan, 0, 0, 0, 1)]))

    async def settle(self, items: list[Settlement], urgent: bool = False) -> None:
        remote = await self._remote(items)
        if not self.up:  # no round trip to a Redis known to be down: held until it answers
            self.backlog.add(remote)
            self.outage.tick(len(self.backlog))
            return
        held = len(self.backlog)
        # the calls that may have run first, alone: only they are ever held whole (``backlog``)
        outage = await self._send_again() if self.backlog.calls else None
        if outage is not None:
            self.backlog.add(remote)
        else:
            batch = self.backlog.take() + remote if self.backlog else remote
            outage = await self._send(batch, urgent or bool(held)) if batch else None
        if outage is not None:
            self._failed(outage)
        elif held or remote:
            self._answered(held)

    async def _remote(self, items: list[Settlement]) -> list[Settlement]:
        """Settles here those of ``items`` admitted here; answers what Redis is to settle: the rest,
        and the usage of those (their spend whole: Redis's budgets never held a reservation for them)."""
        via_local = self.via_local  # empty but after an outage: then no request is looked up in it
        local = [s for s in items if s.plan.lease in via_local] if via_local else []
        remote = [s for s in items if s.plan.lease not in via_local] if via_local else list(items)
        for s in local:
            self.via_local.discard(s.plan.lease)
            self.to_adopt.pop(s.plan.lease, None)
        await self.local.settle(local)
        if self.policy_open:
            for s in remote:
                self.local.released(s.plan)
        if not local:
            return remote
        # the team's usage is counted in Redis all the same, and their spend whole
        return remote + [
            Settlement(
                s.plan,
                0,
                s.prompt,
                s.completion,
                s.requests,
                s.cost,
                s.prompt + s.completion,
                s.cost,
                s.model,
                s.target,
            )
            for s in local
        ]

    async def _send(self, batch: list[Settlement], urgent: bool) -> BaseException | None:
        """Sends ``batch``, keeps what failed; answers the outage, if Redis failed."""
        try:
            failed = await self.redis.settle_each(batch, urgent)
        except REDIS_FAILURES as exc:  # not a call's reply: none went out
            self.backlog.add(batch)
            return exc
        except asyncio.CancelledError:
            _cut(batch)
            raise
        return self._keep(failed)

    async def _send_again(self) -> BaseException | None:
        """Sends the calls kept whole as they first went out, but those past ``ONCE_HOLD_SECONDS``:
        whether those ran can no longer be known (their ids' records may be gone), so their usage is
        given up as unknown and only their lease releases (idempotent) go. Answers the outage, if any."""
        calls, now = self.backlog.take_calls(), time.monotonic()
        stale = [c for c in calls if now - c.sent >= ONCE_HOLD_SECONDS]
        if stale:
            calls = [c for c in calls if now - c.sent < ONCE_HOLD_SECONDS]
            requests = sum(c.requests for c in stale)
            USAGE_UNKNOWN.n += requests
            log.warning(
                "%d requests' settlements unanswered for %d s given up: Redis may not count them",
                requests,
                ONCE_HOLD_SECONDS,
            )
            self.backlog.add(lease_only(s for c in stale for s in c.settled))
        if not calls:
            return None
        try:
            failed = await self.redis.settle_each([], True, calls)
        except REDIS_FAILURES as exc:
            failed = [(c, exc) for c in calls]
        except asyncio.CancelledError:
            _cut([s for c in calls for s in c.settled])
            raise
        return self._keep(failed, whole=True)

    def _keep(self, failed: list[Failed], whole: bool = False) -> BaseException | None:
        """Holds the calls that failed for the next try: one that may have run (``whole``: it went
        out before) as it went out, the others' settlements to be summed again; answers the outage
        among the errors, if any."""
        outage: BaseException | None = None
        for call, error in failed:
            if call_error(error):
                self._refused(call, error)
            else:
                outage = outage or error
                if whole or unanswered(error):
                    self.backlog.keep(call)
                else:
                    self.backlog.add(call.settled)
        return outage

    def _refused(self, call: SettleCall, error: BaseException) -> None:
        """Redis refused ``call`` for its arguments: its usage is dropped, its slots still come back."""
        self.outage.call_error("settlement", error)
        if any(s.requests or s.correction or s.prompt or s.completion for s in call.settled):
            USAGE_DROPPED.n += call.requests
            self.backlog.add(lease_only(call.settled))

    async def renew(self, plans: list[Plan], lease_ttl_ms: int) -> None:
        if self.up and self.to_adopt:
            await self._adopting(lease_ttl_ms)
        remote = [p for p in plans if p.lease not in self.via_local]
        # the mirrored leases of requests Redis admitted too (``record``): renewing one absent is a no-op
        await self.local.renew(
            plans if self.policy_open else [p for p in plans if p.lease in self.via_local], lease_ttl_ms
        )
        if remote and self.up:
            try:
                await self.redis.renew(remote, lease_ttl_ms)
            except REDIS_FAILURES as exc:
                if call_error(exc):
                    self.outage.call_error("renewal", exc)
                else:
                    self._failed(exc)

    async def usage(self, keys: list[str]) -> list[dict[str, int]]:
        try:
            return await self.redis.usage(keys)
        except REDIS_FAILURES as exc:
            self._failed(exc)
            raise LimitsUnavailable("usage is unavailable while Redis is down") from None

    async def close(self) -> None:
        if self.adoption is not None:
            await asyncio.wait({self.adoption})  # bounded by its calls' timeouts; it raises nothing
        if self.backlog and self.up:  # a last chance for what is held
            await self.settle([], urgent=True)
        if self.backlog:
            log.warning("%d held settlements were given up at shutdown", len(self.backlog))
            self.backlog.drop()
        await self.redis.close(give_back=self.up)


def _cut(settled: list[Settlement]) -> None:
    """A settlement round cut with its calls out (the settler stopped at shutdown): they may have run
    or not, and no one is left to send them again; counted as of unknown fate, their leases as left to
    expire, and said once."""
    requests = given_up(settled, USAGE_UNKNOWN)
    log.warning("a settlement round was cut at shutdown: %d requests' usage may not be counted", requests)

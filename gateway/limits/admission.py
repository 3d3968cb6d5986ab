"""Admission: reserve every applicable limit in one atomic call, wait for a concurrency slot until
the request's deadline (fairly across teams, in a bounded queue), keep leases of live requests alive,
and settle each request with its real usage after the answer has gone out.

A refusal by a rate (requests or tokens per minute) answers at once with 429 and ``Retry-After``;
only concurrency waits, because a slot frees as soon as a running request ends. Waiting ends with
``DeadlineExceeded`` whichever deadline bounded it (the request's, its team's or
``admission_timeout``), which each dialect answers its own way (504; Friendli 429, as its docs
promise); with ``admission_timeout: 0`` and no deadline a request does not wait, and a full
concurrency limit is a refusal (429) like the others.

Usage reported by upstreams is clamped here (``limiter.tokens``), before any store sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from gateway.core.errors import DeadlineExceeded, RateLimited
from gateway.core.records import record
from gateway.core.request import InternalRequest
from gateway.core.upstream import Upstream
from gateway.limits import plan as planning
from gateway.limits.backlog import given_up
from gateway.limits.costs import Spend
from gateway.limits.limiter import Limiter, Refusal, Settlement, tokens
from gateway.limits.plan import Layout, LimitValues, Plan
from gateway.limits.prices import PriceTable
from gateway.obs.load import ModelLoad
from gateway.obs.metrics import ADMISSION_WAITS, ADMITTED, QUEUE_DEPTH, RATE_LIMIT, USAGE_DROPPED

log = logging.getLogger("gateway.limits")
POLL_SECONDS = 0.05  # slots freed by other replicas are noticed within this
RESEND_SECONDS = 0.2  # settlements a store did not take are offered to it again this often
SETTLE_SECONDS = 5.0  # at shutdown, for the settlements pending to go out, and again for the limiter to close


@dataclass(frozen=True, slots=True)
class TeamPolicy:
    limits: LimitValues = field(default_factory=LimitValues)
    key_limits: LimitValues = field(default_factory=LimitValues)
    deadline: float | None = None  # default request deadline, seconds
    budget: planning.Budgets = ()  # the team's budget rules and limits (``spend.rules``)
    key_budget: planning.Budgets = ()  # each key's
    ttft: float | None = None  # ceiling on each target's first-token deadline, seconds


@dataclass(frozen=True, slots=True)
class Settings:
    admission_timeout: float = 10.0  # waiting for a slot when neither request nor team sets a deadline
    max_waiters: int = 1000
    lease_ttl: float = 30.0


def _limits_any(policy: TeamPolicy) -> bool:
    limits = (policy.limits, policy.key_limits)
    return any(v.rpm or v.tpm or v.concurrency for v in limits) or bool(policy.budget or policy.key_budget)


HEADER_KIND = {"rpm": "Requests", "tpm": "Tokens", "conc": "Concurrency"}


def refusal_error(refusal: Refusal) -> RateLimited:
    check = refusal.check
    what = {"rpm": "requests per minute", "tpm": "tokens per minute", "conc": "concurrent requests"}[check.kind]
    if refusal.retry_after is None:
        err = RateLimited(f"the request's token estimate exceeds the {check.scope}'s {what} limit ({check.limit})")
    else:
        err = RateLimited(f"{check.scope} limit of {check.limit} {what} reached", retry_after=refusal.retry_after)
    name = HEADER_KIND[check.kind]
    err.headers = {f"X-RateLimit-Limit-{name}": str(check.limit)}
    if refusal.retry_after is not None:
        err.headers[f"X-RateLimit-Reset-{name}"] = f"{refusal.retry_after:.3f}s"
    return err


def deadline_error(refusal: Refusal) -> DeadlineExceeded:
    err = DeadlineExceeded(
        f"the deadline expired while waiting for a concurrency slot ({refusal.check.scope} limit of "
        f"{refusal.check.limit} concurrent requests)"
    )
    err.headers = {"X-RateLimit-Limit-Concurrency": str(refusal.check.limit)}
    return err


@record  # built per request: plain stores, not a frozen dataclass's ``object.__setattr__`` each
class Ask:
    """What one request asks of admission: who asks (``team``, ``key_id``), for what (``request``),
    until when (``deadline``, on the event loop's clock, as ``Call.deadline``). ``load``: the model's
    levels, where a wait for a slot is counted (with its token estimate); ``policies``: the request's
    config generation's (the start-up one by default); ``model``, ``targets``: the route's model label
    and targets, whose dearest price a money budget reserves (a fallback may cost more than the first
    choice)."""

    team: str
    key_id: str
    request: InternalRequest
    deadline: float | None = None
    load: ModelLoad | None = None
    policies: Policies | None = None
    model: str = ""
    targets: Sequence[Upstream] = ()


class Policies:
    """The teams' limits and the prices of one config generation: a reload makes a new one, and a
    request keeps the one it started with (``gateway.web.reload``), so it is charged at the prices it
    was admitted under. Counters live in the limiter, keyed by team and key (``plan.tag``), so a
    team's state carries over from one generation to the next."""

    __slots__ = ("layouts", "limited", "prices", "teams")

    def __init__(self, teams: dict[str, TeamPolicy], prices: PriceTable | None = None) -> None:
        self.teams = teams
        self.prices = prices if prices is not None else PriceTable()
        self.limited = {team for team, policy in teams.items() if _limits_any(policy)}
        self.layouts: dict[tuple[str, str], Layout] = {}  # per team key, built at its first request

    def layout(self, team: str, key_id: str) -> Layout:
        limits = self.layouts.get((team, key_id))
        if limits is None:
            policy = self.teams[team]
            limits = self.layouts[team, key_id] = planning.layout(
                team, key_id, policy.limits, policy.key_limits, policy.budget, policy.key_budget
            )
        return limits


class Waiters:
    """Requests waiting for a concurrency slot, served round-robin across teams."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.by_team: dict[str, deque[asyncio.Future[None]]] = {}
        self.turns: deque[str] = deque()
        self.size = 0

    def join(self, team: str) -> asyncio.Future[None]:
        if self.size >= self.capacity:
            raise RateLimited("too many requests are waiting for admission", retry_after=1.0)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self.by_team.setdefault(team, deque())
        if not queue:
            self.turns.append(team)
        queue.append(fut)
        self.size += 1
        QUEUE_DEPTH.inc()
        return fut

    def leave(self, team: str, fut: asyncio.Future[None]) -> None:
        queue = self.by_team.get(team)
        if queue is not None and fut in queue:
            queue.remove(fut)
            self.size -= 1
            QUEUE_DEPTH.dec()
            if not queue:
                del self.by_team[team]
                self.turns.remove(team)

    def wake_next(self) -> None:
        """A slot was freed here: the next team in turn tries first."""
        for _ in range(len(self.turns)):
            team = self.turns.popleft()
            self.turns.append(team)
            fut = next((f for f in self.by_team[team] if not f.done()), None)
            if fut is not None:
                fut.set_result(None)
                return


class Admission:
    def __init__(
        self, limiter: Limiter, teams: dict[str, TeamPolicy], settings: Settings, spend: Spend | None = None
    ) -> None:
        self.limiter = limiter
        self.spend = spend if spend is not None else Spend()  # budgets' notices (and start-up prices)
        # the start-up generation's; a reload passes its own per request
        self.policies = Policies(teams, self.spend.prices)
        self.settings = settings
        self.waiters = Waiters(settings.max_waiters)
        self.live: dict[str, Plan] = {}
        self.pending: list[Settlement] = []
        # Usage of requests with no limit to settle, summed per usage hash and key until the settler
        # runs (no Settlement per request; with limits, the Redis limiter merges a round's calls).
        self.usage: dict[tuple[str, str, str, str], tuple[Plan, list[int]]] = {}
        self.flush = asyncio.Event()
        self.stopping = False
        self.ttl_ms = int(settings.lease_ttl * 1000)

    def deadline_for(self, team: str, request: InternalRequest, policies: Policies | None = None) -> float | None:
        """On the event loop's clock, as ``Call.deadline``."""
        policy = (policies or self.policies).teams.get(team)
        seconds = request.timeout or (policy.deadline if policy else None)
        return asyncio.get_running_loop().time() + seconds if seconds else None

    def unlimited(
        self, team: str, key_id: str, request: InternalRequest, policies: Policies | None = None
    ) -> Plan | None:
        """The plan of a team no limit applies to, at once: no ``Ask`` built, nothing awaited (most
        requests of an unlimited team; ``admit`` answers the same). None when limits apply."""
        if team in (policies or self.policies).limited:
            return None
        return planning.unlimited(team, key_id, request)

    async def admit(self, ask: Ask) -> Plan:
        """A plan for ``ask`` once every applicable limit has let it through (waiting fairly for a
        concurrency slot until its deadline), or the refusal as a ``GatewayError``."""
        team, key_id, request, deadline, load = ask.team, ask.key_id, ask.request, ask.deadline, ask.load
        policies, model, targets = ask.policies or self.policies, ask.model, ask.targets
        if (free := self.unlimited(team, key_id, request, policies)) is not None:
            return free
        limits = policies.layout(team, key_id)
        rate = self.spend.worst(policies.prices, model, targets) if limits.budgets else None
        plan = planning.planned(team, key_id, limits, request, planning.new_lease(), rate)
        if not plan.checks:
            return plan
        began = time.monotonic()
        wait_until: float | None = deadline  # the default's bound is set at the first refusal
        while True:
            try:
                refusal = await self.limiter.admit(plan, self.ttl_ms)
            except asyncio.CancelledError:
                # The client went away with its admission out: Redis may have run it, or will (the call
                # stays queued). Settled as a request that failed unserved, after the admission on the
                # same connection: else its slot and worst case stay held until the lease TTL.
                self.release(plan, None, None)
                raise
            if refusal is None:
                ADMITTED.n += 1
                if (now := time.monotonic()) != began:
                    ADMISSION_WAITS.observe(now - began)
                if plan.concurrency_keys or plan.layout.budgets:  # renewed while it runs
                    self.live[plan.lease] = plan
                if plan.spent:
                    self.spend.admitted(plan)
                return plan
            RATE_LIMIT.labels(refusal.check.label, "refuse").inc()
            if refusal.check.kind == "bud":
                raise self.spend.refused(plan, refusal)
            if refusal.check.kind != "conc":
                raise refusal_error(refusal)
            clock = asyncio.get_running_loop().time  # the deadline's clock
            if wait_until is None:  # ``admission_timeout`` from the admission's start (``began``)
                wait_until = clock() - (time.monotonic() - began) + self.settings.admission_timeout
            remaining = wait_until - clock()
            if remaining <= 0:
                ADMISSION_WAITS.observe(time.monotonic() - began)
                if deadline is None and not self.settings.admission_timeout:
                    raise refusal_error(refusal)  # configured not to wait: a refusal like the rates'
                raise deadline_error(refusal)
            await self._wait(team, min(remaining, POLL_SECONDS), load, plan.estimate)

    async def _wait(self, team: str, seconds: float, load: ModelLoad | None = None, tokens: int = 0) -> None:
        fut = self.waiters.join(team)
        if load is not None:
            load.wait_began(tokens)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), seconds)
        finally:
            self.waiters.leave(team, fut)
            if load is not None:
                load.wait_ended(tokens)

    def release(
        self,
        plan: Plan,
        prompt: int | None,
        completion: int | None,
        cached: int | None = None,
        model: str = "",
        target: str = "",
        prices: PriceTable | None = None,
        written: int | None = None,
        embedding: bool = False,
    ) -> int | None:
        """Settle after the answer has gone out: off the request path, in the app-owned task set.
        ``model``, ``target``: the route's model label and the target that answered, for the price in
        ``prices`` (the request's generation's; the start-up one by default). ``cached``, ``written``:
        prompt tokens read from and written to the upstream's prompt cache. ``embedding``: an
        embeddings request (the model's embedding price). Answers the request's cost (millionths of
        the currency), None when it is not priced."""
        if plan.settled:
            return None
        plan.settled = True
        prompt, completion = tokens(prompt), tokens(completion)
        self.live.pop(plan.lease, None)
        table = prices if prices is not None else self.policies.prices
        cached_in = 0 if cached is None else tokens(cached) or 0  # most answers report neither
        written_in = 0 if written is None else tokens(written) or 0
        cost = self.spend.cost(table, model, target, prompt or 0, cached_in, completion or 0, written_in, embedding)
        priced = (model, target) if cost is not None else ("", "")
        if not plan.checks:
            where = (plan.usage_key, plan.key_id, *priced)
            summed = self.usage.get(where)
            if summed is None:
                summed = self.usage[where] = (plan, [0, 0, 0, 0])
            sums = summed[1]
            sums[0] += 1
            sums[1] += prompt or 0
            sums[2] += completion or 0
            sums[3] += cost or 0
            self.flush.set()
            return cost
        actual = (prompt or 0) + (completion or 0)
        correction = actual - plan.estimate if prompt is not None or completion is not None else 0
        if plan.layout.budgets or cost is not None:
            # what the budgets hold for it becomes what it cost (nothing known: nothing charged)
            settlement = Settlement(
                plan, correction, prompt or 0, completion or 0, 1,
                (cost or 0) - plan.cost_estimate, actual - plan.estimate, cost or 0, *priced,
            )  # fmt: skip
        else:
            settlement = Settlement(plan, correction, prompt or 0, completion or 0)
        self.pending.append(settlement)
        self.flush.set()
        if plan.concurrency_keys and self.waiters.size:  # with none waiting here, none to wake
            self.waiters.wake_next()
        return cost

    async def settler(self) -> None:
        """Settles what finished since the last round, in one batch (one Redis round trip, shared with
        the admissions of the moment). Stops, once nothing is pending, after ``stopping`` is set: never
        cancelled mid-call, which would fail the calls sharing its round trip."""
        while not (self.stopping and not self.pending and not self.usage):
            if self.limiter.held() and not self.stopping:
                # what the store did not take goes again when it answers (the limiter keeps it)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.flush.wait(), RESEND_SECONDS)
            else:
                await self.flush.wait()
            await self._settle_pending()

    def _taken(self) -> list[Settlement]:
        """What requests released since the last round, taken: their settlements, and the sums of
        those with no limits to correct (one per team key, hour, model and target)."""
        batch, self.pending = self.pending, []
        summed, self.usage = self.usage, {}
        return batch + [
            Settlement(plan, 0, p, c, n, cost=cost, model=model, target=target)
            for (_, _, model, target), (plan, (n, p, c, cost)) in summed.items()
        ]

    async def _settle_pending(self) -> None:
        self.flush.clear()
        batch = self._taken()
        if not batch and not self.limiter.held():
            return
        held = self.limiter.held()
        try:
            # a request waiting here for a slot must see the slots freed by its next admission
            await self.limiter.settle(batch, urgent=self.waiters.size > 0)
        except Exception:  # the settler must outlive a bad batch
            log.exception("settling %d requests failed", len(batch))
        if any(s.plan.concurrency_keys for s in batch) or self.limiter.held() < held:
            self.waiters.wake_next()

    async def stop(self, settler: asyncio.Task[None]) -> None:
        """At shutdown: the settler ends once nothing is pending, or is cut after ``SETTLE_SECONDS``
        (the round it had out is counted by the limiter as of unknown fate: its calls may have run);
        then what requests released since its last round goes in one more, and what even that does not
        take is counted as dropped, never lost unsaid."""
        self.stopping = True
        self.flush.set()
        done, _ = await asyncio.wait({settler}, timeout=SETTLE_SECONDS)
        if not done:
            log.warning("settling at shutdown took over %g s: the round out was cut", SETTLE_SECONDS)
            settler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await settler
        if self.pending or self.usage:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settle_pending(), SETTLE_SECONDS)
        self._drop_pending()

    def _drop_pending(self) -> None:
        """What no round took, given up: its usage and leases counted, and said once."""
        left = self._taken()
        if not left:
            return
        requests = given_up(left, USAGE_DROPPED)
        log.warning("%d requests' settlements were dropped at shutdown: their usage is not counted", requests)

    async def keeper(self) -> None:
        """Renews the leases of running requests, so only a dead gateway's leases expire."""
        while True:
            await asyncio.sleep(self.settings.lease_ttl / 3)
            if self.live:
                try:
                    await self.limiter.renew(list(self.live.values()), self.ttl_ms)
                except Exception:  # the keeper must outlive a bad round
                    log.exception("lease renewal failed")


@contextlib.asynccontextmanager
async def running(admission: Admission) -> AsyncIterator[None]:
    keeper = asyncio.create_task(admission.keeper(), name="lease-keeper")
    settler = asyncio.create_task(admission.settler(), name="settler")
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        await admission.stop(settler)
        try:
            await asyncio.wait_for(admission.limiter.close(), SETTLE_SECONDS)
        except Exception:  # shutting down: what is held ahead expires by itself
            log.warning("admissions made ahead were not given back", exc_info=True)

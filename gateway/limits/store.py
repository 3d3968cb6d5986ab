"""Limit state in Redis, exact across replicas: the Lua scripts (``scripts``) called over one client,
admissions made ahead (``advance``) and settlements merged per team key."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from random import getrandbits
from typing import Any

import pydantic_core
from redis.exceptions import (
    ClusterDownError,
    MaxConnectionsError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.limits import scripts
from gateway.limits.advance import RESERVE_SECONDS, Reserve, Reserves
from gateway.limits.argv import Templates
from gateway.limits.channel import ScriptChannel, Unsent
from gateway.limits.limiter import Refusal, SettleCall, Settlement
from gateway.limits.plan import USAGE_TTL_SECONDS, Check, Plan, tag
from gateway.obs.metrics import (
    ADMITTED_AHEAD,
    GIVEN_BACK,
    REDIS_ROUND_TRIPS,
    SETTLES_RESENT_APPLIED,
    SETTLES_RESENT_DUPLICATE,
)
from gateway.runtime.internals import bulk
from gateway.runtime.internals import evalsha_head as pack_head

log = logging.getLogger("gateway.limits")


# Error replies that mean Redis cannot serve anyone now (by the code an error reply starts with),
# beyond those redis-py raises as their own classes.
_UNAVAILABLE = (OutOfMemoryError, ReadOnlyError, ClusterDownError, TryAgainError, NoPermissionError)
_UNAVAILABLE_CODES = frozenset({"BUSY", "LOADING", "MASTERDOWN", "MISCONF", "NOREPLICAS", "CLUSTERDOWN"})


def call_error(exc: BaseException) -> bool:
    """Whether Redis refused this one call (a script error on its arguments, a wrong key type) while
    serving others: not an outage, so no reason to stop sending it anything."""
    if not isinstance(exc, ResponseError) or isinstance(exc, _UNAVAILABLE):
        return False
    return str(exc).split(" ", 1)[0] not in _UNAVAILABLE_CODES


def unanswered(exc: BaseException) -> bool:
    """Whether a failed script call may have run: it went out and its answer did not come back (a
    timeout; a connection lost with it out). Only the channel tells a call that never went out
    (``Unsent``): redis-py's own client (Redis Cluster's, a script loaded again) sends a call again by
    itself after a connection error, and its last error does not say what the earlier tries did, so
    any connection error of its but a full pool's may have come after a call that ran."""
    if isinstance(exc, Unsent | MaxConnectionsError):
        return False
    return isinstance(exc, RedisTimeoutError | TimeoutError | RedisConnectionError)


def _args(plan: Plan, *extra: str | int, settled: list[Settlement] | None = None) -> bytes:
    """ARGV[1] (``scripts``): a [kind, limit, param] triple per check, then ``extra``; ``settled``: the
    settlements merged into one call, whose leases and budget reservations it releases (a lease-only
    settlement's reservation is left to expire: the request's cost may have been settled already)."""
    if settled is None:
        triples = [
            plan.budget(i, c) if c.kind == "bud" else [c.kind, c.limit, plan.param(c)]
            for i, c in enumerate(plan.checks)
        ]
        return pydantic_core.to_json([*triples, *extra])
    triples = []
    for i, c in enumerate(plan.checks):
        if c.kind == "bud":
            held = [m for s in settled if s.requests and (m := s.plan.held(i, c))]
            triples.append(plan.budget(i, c, held))
        else:
            triples.append([c.kind, c.limit, [s.plan.lease for s in settled] if c.kind == "conc" else plan.param(c)])
    return pydantic_core.to_json([*triples, *extra])


def budget_answer(plan: Plan, result: Any) -> Refusal | None:
    """ADMIT's answer to an admission with budgets (``scripts``): a refusal, or None with the budgets'
    spend (``plan.spent``) and the soft budget it went past (``plan.over``) on the plan."""
    code, i = int(result[0]), int(result[1])
    if code == 1:
        check = plan.checks[i - 1]
        window = plan.windows[i - 1]
        if window is None:  # another limit refused
            retry = int(result[2])
            return Refusal(check, None if retry < 0 else retry / 1000)
        return Refusal(check, max(0.0, window.reset - time.time()), int(result[3]))
    plan.spent = tuple(map(int, result[3:]))
    if code == 2:
        plan.over = plan.checks[i - 1]
    return None


def _max_age(lease_ttl_ms: int) -> float:
    """The oldest reserve a request may take (``Reserves.take``): the reserve's concurrency lease,
    renewed only once a request holds it, must outlive the wait for the lease keeper."""
    return min(RESERVE_SECONDS, lease_ttl_ms / 2000)


def _give_back_args(reserve: Reserve) -> bytes:
    """GIVE_BACK's argument: the admission's triples, an rpm one with the arrival time it set, a
    concurrency one with the leases of the units left and a budget one with their reservations, then
    the Redis time it was made at (``reserve.marks``) and how many units are left."""
    plan, marks, left = reserve.plan, reserve.marks, reserve.left
    triples = [
        plan.budget(i, c, _units_held(plan, i, c, left))
        if c.kind == "bud"
        else [c.kind, c.limit, marks[i + 1] if c.kind == "rpm" else left if c.kind == "conc" else plan.param(c)]
        for i, c in enumerate(plan.checks)
    ]
    return pydantic_core.to_json([*triples, marks[0], len(left)])


def _units_held(plan: Plan, i: int, check: Check, leases: list[str]) -> list[str]:
    """The reservations ADMIT made under budget check ``i`` for the units of ``leases`` (the units'
    leases in place of the admission's in ``Plan.held``'s member); none where it held none."""
    mine = plan.held(i, check)
    rest = mine[len(plan.lease) :]
    return [lease + rest for lease in leases] if mine else []


Failed = tuple[SettleCall, Exception]  # a script call that failed, and its error


def _settled(answer: Any, resent: bool) -> None:
    """Counts what a SETTLE call sent again found: 1, its id's record (the first call had run; this one
    changed nothing), also when Redis Cluster's client sent it again by itself; 0 on a call sent
    again, that it charged now (the first never ran)."""
    if answer == 1:
        SETTLES_RESENT_DUPLICATE.n += 1
    elif resent:
        SETTLES_RESENT_APPLIED.n += 1


def _merged(items: list[Settlement]) -> list[tuple[Settlement, list[Settlement]]]:
    """Settlements of the same keys (one team key's requests), summed into one script call: token
    corrections, usage and spend add up; with it, the settlements summed (whose leases and
    reservations it releases, and to keep if the call fails). A settlement per request cost more CPU
    under load (argument JSON, the call's packing and reply) than the rest of its limits
    (docs/performance.md)."""
    groups: dict[tuple[object, ...], tuple[Settlement, list[int], list[Settlement]]] = {}
    for s in items:
        plan = s.plan
        # ``Settlement.group``, with the budget windows by identity (made once per layout and period):
        # a window's hash is a Python-level hash of its fields, two per settlement
        same = (plan.layout.keys, plan.usage_key, plan.key_id, s.model, s.target, id(plan.windows))
        group = groups.get(same)
        if group is None:
            group = groups[same] = (s, [0, 0, 0, 0, 0, 0, 0], [])
        totals = group[1]
        totals[0] += s.correction
        totals[1] += s.requests
        totals[2] += s.prompt
        totals[3] += s.completion
        if s.model or plan.layout.budgets:
            totals[4] += s.money
            totals[5] += s.spent_tokens
            totals[6] += s.cost
        group[2].append(s)
    return [
        (Settlement(first.plan, t[0], t[2], t[3], t[1], t[4], t[5], t[6], first.model, first.target), summed)
        for first, t, summed in groups.values()
    ]


def _call(s: Settlement, settled: list[Settlement], now: float) -> SettleCall:
    """SETTLE's call for the settlements ``settled``, summed in ``s``, under an id of its own."""
    plan = s.plan
    once = f"{tag(plan.team)}:settled:{getrandbits(64):016x}"
    return SettleCall((*plan.layout.keys, plan.usage_key, once), _settle_args(s, settled), settled, now)


def _settle_args(s: Settlement, settled: list[Settlement]) -> bytes:
    """SETTLE's argument (``scripts``): the budgets' part only when a budget or a price is involved:
    what the requests really spent (money, tokens), since the script takes back their reservations."""
    plan = s.plan
    base = (s.correction, s.requests, s.prompt, s.completion, plan.key_id, USAGE_TTL_SECONDS)
    if not (plan.layout.budgets or s.model):
        return _args(plan, *base, settled=settled)
    spend = (s.cost, s.prompt + s.completion, s.cost, *((s.model, s.target) if s.model else ()))
    return _args(plan, *base, *spend, settled=settled)


class RedisLimiter:
    """The Lua scripts over one client. Script calls go through a ``ScriptChannel`` (group commit on
    one connection: the calls that arrive while a round trip is out share the next one, admissions and
    settlements alike); each script still runs on its own and atomically. Redis Cluster keeps one
    call per admission through the cluster client (teams live on different nodes).

    ``advance``: admit a team key's next request ahead while its requests come back to back
    (``gateway.limits.advance``), taking the round trip off their path."""

    def __init__(self, client: Any, advance: bool = False) -> None:
        self.client = client
        self.cluster = not hasattr(client, "connection_pool")
        self._admit = client.register_script(scripts.ADMIT)
        self._settle = client.register_script(scripts.SETTLE)
        self._renew = client.register_script(scripts.RENEW)
        self._give_back = client.register_script(scripts.GIVE_BACK)
        self._adopt = client.register_script(scripts.ADOPT)
        self._channel = None if self.cluster else ScriptChannel(client)
        # The admission's command up to its argument, packed once per team key (its keys)
        self._admit_heads: dict[tuple[str, ...], bytes] = {}
        self._templates = Templates()  # and its argument, filled in per request
        self.reserves = Reserves() if advance else None
        self._sweep: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._asks: set[asyncio.Future[Any]] = set()  # admissions asked ahead, unanswered
        self._closed = False

    @property
    def batches(self) -> int:
        """Round trips to Redis for script calls, for tests and debugging."""
        return self._channel.round_trips if self._channel is not None else 0

    async def admit(self, plan: Plan, lease_ttl_ms: int) -> Refusal | None:
        reserves = self.reserves
        if reserves is not None:
            estimate, cost = plan.estimate, plan.cost_estimate  # its own, before a reserve's replaces them
            now = time.monotonic()
            if reserves.take(plan, now, _max_age(lease_ttl_ms)):
                ADMITTED_AHEAD.n += 1
                self._ask_ahead(reserves, plan, lease_ttl_ms, estimate, cost, now)
                return None
        if plan.layout.budgets:
            return await self._admit_budgets(plan, lease_ttl_ms)
        if reserves is None:
            args = self._admit_args(plan, lease_ttl_ms)
            result = await self._run(self._admit, plan.layout.keys, args, self._admit_heads)
        else:
            result = await self._on_path(reserves, plan, lease_ttl_ms)
        if int(result[0]) == 0:
            if reserves is not None:
                self._ask_ahead(reserves, plan, lease_ttl_ms, plan.estimate, 0, time.monotonic())
            return None
        if reserves is not None and reserves.take(plan, time.monotonic(), _max_age(lease_ttl_ms)):
            ADMITTED_AHEAD.n += 1  # refused, but this replica holds an admission for it: it is not left unused
            return None
        retry = int(result[2])
        return Refusal(plan.checks[int(result[1]) - 1], None if retry < 0 else retry / 1000)

    async def _admit_budgets(self, plan: Plan, lease_ttl_ms: int, again: bool = True) -> Refusal | None:
        """An admission with budgets on its request's path: its spend comes back with the answer. A
        budget that refuses it while this replica holds units its worst case does not fit in is asked
        ``again`` once those are given back: a replica refuses nothing for room it holds unused."""
        reserves = self.reserves
        if reserves is not None:
            result = await self._on_path(reserves, plan, lease_ttl_ms)
        else:
            keys, args = plan.layout.keys, self._admit_args(plan, lease_ttl_ms)
            if self._channel is None:
                return budget_answer(plan, await self._run(self._admit, keys, args))
            result = await self._send(self._admit, keys, args, heads=self._admit_heads)  # ``_run``'s, inline
            if isinstance(result, Exception):
                result = await self._error_reply(self._admit, keys, [args], result)
            return budget_answer(plan, result)
        refusal = budget_answer(plan, result)
        if refusal is None:
            self._ask_ahead(reserves, plan, lease_ttl_ms, plan.estimate, plan.cost_estimate, time.monotonic())
        elif reserves.take(plan, time.monotonic(), _max_age(lease_ttl_ms)):
            ADMITTED_AHEAD.n += 1  # a unit this replica holds was counted in the budget: it is not left unused
            return None
        elif again and refusal.check.kind == "bud" and (unused := reserves.ready.pop(plan.layout.keys, None)):
            # this limiter's task, not the request's: a client gone meanwhile (the request cancelled)
            # would cancel the calls before they went out, and the units would wait for their TTL
            await asyncio.shield(self._spawn(self._give_back_all([unused])))
            return await self._admit_budgets(plan, lease_ttl_ms, again=False)
        return refusal

    def _admit_args(self, plan: Plan, *extra: int) -> bytes:
        """ADMIT's argument: from the team key's template (``argv``), or the generic walk where none fits."""
        args = self._templates.args(plan, *extra)
        return args if args is not None else _args(plan, *extra)

    async def _on_path(self, reserves: Reserves, plan: Plan, lease_ttl_ms: int) -> Any:
        """The admission's round trip, counted in ``reserves.on_path`` while it is out."""
        keys = plan.layout.keys
        reserves.on_path[keys] = reserves.on_path.get(keys, 0) + 1
        try:
            return await self._run(self._admit, keys, self._admit_args(plan, lease_ttl_ms), self._admit_heads)
        finally:
            left = reserves.on_path[keys] - 1
            if left:
                reserves.on_path[keys] = left
            else:
                del reserves.on_path[keys]

    def _ask_ahead(
        self, reserves: Reserves, plan: Plan, lease_ttl_ms: int, estimate: int, cost: int, now: float
    ) -> None:
        """Admit this team key's next request now, in the background, if its requests come back to back."""
        if self._closed:
            return
        wanted = reserves.wanted(plan, now, estimate, cost)
        if wanted is None:
            return
        ahead, units = wanted
        keys = ahead.layout.keys
        args = self._admit_args(ahead, lease_ttl_ms, units)
        if self._channel is None:
            self._spawn(self._ahead_alone(reserves, ahead, args))
            return
        sent = self._send(self._admit, keys, args, heads=self._admit_heads)
        sent.add_done_callback(lambda done: self._answered(reserves, ahead, done))
        self._asks.add(sent)

    async def _ahead_alone(self, reserves: Reserves, ahead: Plan, args: bytes) -> None:
        result = None
        try:
            result = await self._run(self._admit, ahead.layout.keys, args)
        except Exception:  # as refused: the next request is admitted on its path
            log.debug("an admission asked ahead failed", exc_info=True)
        finally:
            self._granted(reserves, ahead, result)

    def _answered(self, reserves: Reserves, ahead: Plan, done: asyncio.Future[Any]) -> None:
        self._asks.discard(done)
        # A failed or refused call leaves no reserve: the next request is admitted on its path (and
        # a script Redis lost is loaded again there). One whose answer never came (a timeout) holds
        # what it took until time and the lease TTL free it, as an admission on a path would.
        result = None if done.cancelled() or done.exception() is not None else done.result()
        self._granted(reserves, ahead, result)

    def _granted(self, reserves: Reserves, ahead: Plan, result: Any) -> None:
        granted = None
        if isinstance(result, list) and int(result[0]) == 0:  # {0, now, units, marks...}
            granted = Reserve(ahead, time.monotonic(), [int(result[1]), *map(int, result[3:])], int(result[2]))
        if granted is not None and self._closed:  # answered after close() gave back the rest
            self._spawn(self._give_back_all([granted]))
            granted = None
        reserves.answered(ahead, granted)
        if granted is not None and self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(RESERVE_SECONDS, self._give_back_stale)

    def _give_back_stale(self) -> None:
        self._sweep = None
        assert self.reserves is not None
        stale = self.reserves.stale(time.monotonic())
        if stale:
            self._spawn(self._give_back_all(stale))
        if self.reserves.ready:
            self._sweep = asyncio.get_running_loop().call_later(RESERVE_SECONDS / 2, self._give_back_stale)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """``work`` run to its end whoever waits for it (``close`` awaits what is left)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _give_back_all(self, reserves: list[Reserve]) -> None:
        """One call each, sent together (one round trip through the channel)."""
        reserves = [r for r in reserves if r.taken < r.units]
        calls = [self._run(self._give_back, r.plan.layout.keys, _give_back_args(r)) for r in reserves]
        for reserve, outcome in zip(reserves, await asyncio.gather(*calls, return_exceptions=True), strict=True):
            if isinstance(outcome, BaseException):  # what it holds expires: arrival and tokens with time, lease by TTL
                log.debug("giving back an admission made ahead failed: %s", outcome)
            else:
                GIVEN_BACK.n += reserve.units - reserve.taken

    async def close(self, give_back: bool = True) -> None:
        """``give_back``: False while Redis is known to be down (what is held then expires by itself)."""
        self._closed = True
        if self._asks:  # what they grant is given back as it comes
            await asyncio.wait(list(self._asks), timeout=1)
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if self.reserves is not None and give_back:
            self._spawn(self._give_back_all(self.reserves.drain()))
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(
        self, script: Any, keys: tuple[str, ...], args: bytes, heads: dict[tuple[str, ...], bytes] | None = None
    ) -> Any:
        if self._channel is None:
            began = time.perf_counter()
            result = await script(keys=keys, args=[args])
            REDIS_ROUND_TRIPS.observe(time.perf_counter() - began)
            return result
        result = await self._send(script, keys, args, heads=heads)
        if isinstance(result, Exception):  # rare: not awaited through ``_reply`` (a coroutine less each call)
            return await self._error_reply(script, keys, [args], result)
        return result

    def _send(
        self,
        script: Any,
        keys: tuple[str, ...],
        args: bytes,
        defer: bool = False,
        heads: dict[tuple[str, ...], bytes] | None = None,
    ) -> asyncio.Future[Any]:
        """``heads``: packed command heads of this script to reuse, by keys (the keys that recur)."""
        assert self._channel is not None
        packed = heads.get(keys) if heads is not None else None
        if packed is None:
            packed = pack_head(script.sha.encode(), [k.encode() for k in keys], 1)
            if heads is not None:
                heads[keys] = packed
        return self._channel.evalsha(packed, args, defer)

    @classmethod
    async def _reply(cls, script: Any, keys: Sequence[str], args: list[Any], sent: asyncio.Future[Any]) -> Any:
        """The reply to a call sent through the channel, ``args`` being the script's arguments."""
        result = await sent
        if isinstance(result, Exception):
            return await cls._error_reply(script, keys, args, result)
        return result

    @staticmethod
    async def _error_reply(script: Any, keys: Sequence[str], args: list[Any], error: Exception) -> Any:
        """A call Redis answered with an error: a script it lost is loaded by calling it again."""
        if isinstance(error, NoScriptError):  # Redis restarted or flushed: the call loads it
            return await script(keys=keys, args=args)
        raise error

    async def settle(self, items: list[Settlement], urgent: bool = False) -> None:
        failed = await self.settle_each(items, urgent)
        if failed:
            raise failed[0][1]

    def held(self) -> int:
        return 0  # a failed settlement is raised; ``failover`` keeps it

    async def settle_each(
        self, items: list[Settlement], urgent: bool = False, again: list[SettleCall] | None = None
    ) -> list[Failed]:
        """Settle ``items``, and send the calls ``again`` as they first went out; answers the calls
        that failed, with their error: the others ran (or had: ``scripts.SETTLE``), so only those
        may be sent again."""
        now = time.monotonic()
        calls = [_call(s, summed, now) for s, summed in _merged(items)]
        resent = len(again or ())  # the first ``resent`` calls are sent again
        if again:
            calls = again + calls
        if self.cluster:
            return await self._settle_apart(calls, resent)
        failed: list[Failed] = []
        # one round trip for all, shared with admissions under load (the channel holds them briefly)
        sent = [self._send(self._settle, c.keys, c.args, defer=not urgent) for c in calls]
        for i, (call, future) in enumerate(zip(calls, sent, strict=True)):
            try:  # every reply is awaited, so none is left unretrieved
                _settled(await self._reply(self._settle, call.keys, [call.args], future), i < resent)
            except Exception as exc:
                failed.append((call, exc))
        return failed

    async def _settle_apart(self, calls: list[SettleCall], resent: int) -> list[Failed]:
        """Redis Cluster: keys of different teams live on different nodes, one call each; once Redis
        failed, the rest are kept for later (``Unsent``) rather than each waiting out the timeout now."""
        failed: list[Failed] = []
        outage: Exception | None = None
        for i, call in enumerate(calls):
            if outage is not None:
                failed.append((call, Unsent(f"not sent after {type(outage).__name__}: {outage}")))
                continue
            try:
                _settled(await self._run(self._settle, call.keys, call.args), i < resent)
            except Exception as exc:
                failed.append((call, exc))
                outage = None if call_error(exc) else exc
        return failed

    async def adopt(self, plan: Plan, lease_ttl_ms: int) -> None:
        """Adds a running request admitted elsewhere (this process, Redis being out) to Redis's
        limits, unchecked (``scripts.ADOPT``): settled and renewed as if Redis had admitted it."""
        await self._run(self._adopt, plan.layout.keys, _args(plan, lease_ttl_ms))

    async def renew(self, plans: list[Plan], lease_ttl_ms: int) -> None:
        """One call per running request, sent together: one round trip through the channel (Redis
        Cluster: one call each, its teams on different nodes). Raises the first call's error, if any."""
        calls = [(keys, members) for keys, members in map(Plan.renewals, plans) if keys]
        if self._channel is None:
            for keys, members in calls:
                await self._renew(keys=keys, args=[lease_ttl_ms, *members])
            return
        ttl, sha = bulk(b"%d" % lease_ttl_ms), self._renew.sha.encode()
        # RENEW takes the TTL, then each member, as arguments: all but the last packed with the head
        sent = [
            self._channel.evalsha(_renew_head(sha, keys, ttl, members), members[-1].encode()) for keys, members in calls
        ]
        failure: Exception | None = None
        for (keys, members), future in zip(calls, sent, strict=True):
            try:  # every reply is awaited, so none is left unretrieved
                await self._reply(self._renew, keys, [lease_ttl_ms, *members], future)
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    async def usage(self, keys: list[str]) -> list[dict[str, int]]:
        """Hashes of counters, in one round trip (a month of hourly buckets is hundreds of them)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hgetall(key)
            answers = await pipe.execute()
        return [{_text(k): int(v) for k, v in raw.items()} for raw in answers]


def _renew_head(sha: bytes, keys: list[str], ttl: bytes, members: list[str]) -> bytes:
    """RENEW's call on ``keys`` up to its last argument: the TTL (packed) and the members but the last."""
    head = pack_head(sha, [k.encode() for k in keys], 1 + len(members))
    return head + ttl + b"".join([bulk(m.encode()) for m in members[:-1]])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

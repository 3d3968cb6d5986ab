"""The prefix index every gateway replica shares (``balance.strategy: kv-shared``): per prompt block
hash, the replicas that served it and how often, in Redis, so that two gateways send a prompt's prefix
to the same vLLM replica instead of each learning its own, diverging map.

One Lua script per request, at choice time: it counts every gateway's requests in flight on each
replica (``backends/pool/inflight.py``: a scraped snapshot is stale within a request's lifetime, and the
herd it causes drives prefixes from their homes), and among the replicas near enough the least loaded
(``balance.shared_load``, ``affinity_slack``) keeps the one holding the longest run of the prompt's
blocks; among equal runs the one that served it most often (the prefix's home), then the session's
replica, then the least loaded (``balance.prefer``, the same choice the ``prefix`` strategy makes
locally). It adds the request to the chosen replica's count, as a lease the pool releases when the
request ends. It records every
block against the choice (``HINCRBY`` into a hash per block) with a TTL, the bound on the index's size:
unused prefixes expire. A request that yields to load adds its replica to the blocks' hashes instead of
replacing the home: the next one goes home again, so a hot prefix does not move back and forth and fill
every replica's cache (the KV cache of a busy replica holds a share of the prefixes, not all of them).
Recording at choice time, not after the answer, is what llm-d's picker does too: the next request for
the same prefix, from any gateway, already finds it. A cached prefix outranks a session here: a
conversation's own turns are recorded where it runs, so they lead back to it anyway, while a session
that opens with a shared system prompt finds the replica already holding it.

Redis is never on the critical path for longer than ``shared_timeout_ms``: a slow or failed answer
falls back to the balancer's local order (``prefix``) and keeps Redis out for a moment
(``SLOW_RETRY_SECONDS``) or, when it failed, for ``RETRY_SECONDS``.
Where a pool also reads vLLM's KV-cache events (``balance.kv_events``, ``backends/pool/kv_router.py``), what
the engines report holding is asked first, and this index decides when the events do not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from backends.pool.balance import HOME, Balancer, Plan, outcome
from backends.pool.inflight import KEEP_TIMEOUT, Leases, inflight_key
from gateway.core.request import InternalRequest
from gateway.runtime.throttle import LogThrottle

log = logging.getLogger("gateway.replicas")
throttled = LogThrottle(log)  # lines a request can cause: one a period per kind
RETRY_SECONDS = 2.0  # how long a failed Redis call keeps the shared index out
# How long a slow one does: a few requests' time, not seconds. Slow answers come in bursts when the
# gateway's own event loop stalls (on a crowded host the limits' Redis calls time out in the same
# milliseconds), which says nothing of Redis; a stalled Redis still costs only one wait per interval.
SLOW_RETRY_SECONDS = 0.25
MAX_BLOCKS = 256  # blocks looked up and recorded per request: bounds the script's work

# KEYS: the pool's homes (replica → new prefixes lately placed there, as ``PrefixIndex.homes``), then
# each available replica's in-flight leases (``backends/pool/inflight.py``), in ``Plan.ranked`` order, then
# the prompt's block keys in order (one hash slot: the target's hash tag).
# ARGV: ttl seconds, the lease in ms, the request's lease ('' for none), affinity_slack, how many
# replicas are available, the session's replica among them (1-based, 0 for none), then per replica its
# url, ``ReplicaState.extra``, ``ReplicaState.batch`` and the blocks vLLM says it holds (0 without events).
# Returns {the chosen replica, its cached depth, the deepest any available replica holds, then each
# replica's count before this request}: a choice shallower than the deepest is affinity yielding to
# load; the counts serve the local order while Redis is out (``SharedRouter.recent_order``). Loads are
# ``balance.shared_load``, the candidates ``balance.shared_candidates``, the choice ``balance.prefer``'s:
# ``Balancer.counted_order``.
PICK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, lease, member = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local slack, n, session = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local urls, hint, load, least, counted = {}, {}, {}, nil, {}
for j = 1, n do
  local a = 6 + 4 * (j - 1)
  urls[j], hint[j] = ARGV[a + 1], tonumber(ARGV[a + 4])
  redis.call('ZREMRANGEBYSCORE', KEYS[1 + j], '-inf', now)
  local count, batch = redis.call('ZCARD', KEYS[1 + j]), tonumber(ARGV[a + 3])
  counted[j] = count
  local l = count + tonumber(ARGV[a + 2])
  if batch > 0 and count > batch then l = l + count - batch end
  load[j] = l
  if least == nil or l < least then least = l end
end
local cands = {}
for j = 1, n do
  if load[j] <= least + slack then cands[#cands + 1] = j end
end
table.sort(cands, function(x, y)
  if load[x] ~= load[y] then return load[x] < load[y] end
  return x < y
end)
if session > 0 and load[session] <= least + slack then
  local moved = {session}
  for _, j in ipairs(cands) do
    if j ~= session then moved[#moved + 1] = j end
  end
  cands = moved
end
local first = 2 + n
local alive, depth, uses, deepest = {}, {}, {}, 0
for j = 1, n do alive[j] = j end
for k = first, #KEYS do
  if #alive == 0 then break end
  local fields = {}
  for i, j in ipairs(alive) do fields[i] = urls[j] end
  local counts = redis.call('HMGET', KEYS[k], unpack(fields))
  local still = {}
  for i, j in ipairs(alive) do
    if counts[i] then
      still[#still + 1] = j
      depth[j], uses[j], deepest = k - first + 1, tonumber(counts[i]), k - first + 1
    end
  end
  alive = still
end
local homes = {}
if first <= #KEYS then
  local fields = {}
  for i, j in ipairs(cands) do fields[i] = urls[j] end
  homes = redis.call('HMGET', KEYS[1], unpack(fields))
end
local choice, best = cands[1], {-1, -1, -1, 0}
for i, j in ipairs(cands) do
  local score = {hint[j], depth[j] or 0, uses[j] or 0, -(tonumber(homes[i]) or 0)}
  for s = 1, 4 do
    if score[s] ~= best[s] then
      if score[s] > best[s] then choice, best = j, score end
      break
    end
  end
end
local url = urls[choice]
for k = first, #KEYS do
  redis.call('HINCRBY', KEYS[k], url, 1)
  redis.call('EXPIRE', KEYS[k], ttl)
end
if first <= #KEYS and best[1] == 0 and best[2] == 0 then
  local fade, all = 2 * n, redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local c = math.floor(tonumber(all[i + 1]) * (fade - 1) / fade)
    if c > 0 then redis.call('HSET', KEYS[1], all[i], c) else redis.call('HDEL', KEYS[1], all[i]) end
  end
  redis.call('HINCRBY', KEYS[1], url, HOME)
end
redis.call('EXPIRE', KEYS[1], ttl)
if member ~= '' then
  redis.call('ZADD', KEYS[1 + choice], now + lease, member)
  redis.call('PEXPIRE', KEYS[1 + choice], 2 * lease)
end
return {url, best[2], deepest, unpack(counted)}
""".replace("HOME", str(HOME))


def homes_key(target: str) -> str:
    return f"gw:homes:{{{target}}}"


def block_key(target: str, block: int) -> str:
    """A block's hash in Redis. The hash tag keeps a pool's keys on one Cluster slot; "blocks", not the
    "prefix" of the one-owner strings before, so that those left in Redis by an upgrade are not misread."""
    return f"gw:blocks:{{{target}}}:{block:016x}"


class LocalRouter:
    """The balancer's own order: every strategy but ``kv-shared``, and ``kv-shared`` without Redis."""

    def __init__(self, balancer: Balancer) -> None:
        self.balancer = balancer

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def order(
        self, request: InternalRequest, session: str | None, now: float, lease: str | None = None
    ) -> tuple[list[int], list[int]]:
        plan = self.balancer.plan(request, session, now)
        return await self.choose(plan, now), plan.hashes

    async def choose(self, plan: Plan, now: float, lease: str | None = None) -> list[int]:
        """The order for a plan already made."""
        return self.balancer.local_order(plan)

    def release(self, lease: str) -> None:
        """Counted in this process only (``ReplicaState.in_flight``): nothing to release."""


def router(balancer: Balancer, target: str, urls: list[str], client: Any | None) -> LocalRouter | SharedRouter:
    """The pool's router: ``client`` is the app's Redis client, if Redis is configured."""
    if client is not None and balancer.settings.strategy == "kv-shared":
        return SharedRouter(balancer, target, urls, client)
    return LocalRouter(balancer)


class SharedRouter:
    """The pool's order for one request: the shared index's choice first when Redis answers in time,
    the balancer's local order otherwise. ``hits`` (a cached prefix found), ``yields`` (a deeper one
    passed over for load) and ``fallbacks`` (Redis failed or was too slow) count what happened."""

    def __init__(self, balancer: Balancer, target: str, urls: list[str], client: Any) -> None:
        self.balancer = balancer
        self.urls = urls
        self._index = {url: i for i, url in enumerate(urls)}
        self.target = target
        self._client = client
        self._pick = client.register_script(PICK)
        self.leases = Leases(client, balancer.settings.shared_lease)
        self._out_until = 0.0
        # The counts of the last answer: (when, replica → every gateway's count, replica → this
        # process's own count then), for the local order while Redis is out.
        self._seen: tuple[float, dict[int, int], dict[int, int]] | None = None
        self.hits = 0
        self.yields = 0
        self.fallbacks = 0

    async def start(self) -> None:
        """Loads the script (the first requests would otherwise each pay a round trip for it) and
        starts the task that releases and renews leases."""
        try:
            async with asyncio.timeout(KEEP_TIMEOUT):
                await self._client.script_load(PICK)
        except Exception as exc:  # the first request loads it then, or routes locally
            log.warning("shared prefix index: script not loaded at start (%r)", exc)
        await self.leases.start()

    async def close(self) -> None:
        await self.leases.close()

    def release(self, lease: str) -> None:
        self.leases.release(lease)

    async def order(
        self, request: InternalRequest, session: str | None, now: float, lease: str | None = None
    ) -> tuple[list[int], list[int]]:
        plan = self.balancer.plan(request, session, now)
        return await self.choose(plan, now, lease), plan.hashes

    async def choose(self, plan: Plan, now: float, lease: str | None = None) -> list[int]:
        """The order for a plan already made."""
        chosen = await self.shared_order(plan, now, lease) or self.recent_order(plan, now)
        return self.balancer.local_order(plan) if chosen is None else chosen

    def recent_order(self, plan: Plan, now: float, hints: dict[int, int] | None = None) -> list[int] | None:
        """While Redis is out: the shared rule on the last answer's counts, moved by this process's own
        requests since, if that answer is younger than a scrape (the scraped gauges are older); else None."""
        if self._seen is None or not plan.ranked or now - self._seen[0] > self.balancer.settings.scrape_interval:
            return None
        _, counts, own = self._seen
        states = self.balancer.replicas
        guess = [max(0, counts.get(i, 0) + states[i].in_flight - own.get(i, 0)) for i in plan.ranked]
        return self.balancer.counted_order(plan, guess, now, hints)

    async def shared_order(
        self, plan: Plan, now: float, lease: str | None, hints: dict[int, int] | None = None
    ) -> list[int] | None:
        """The script's order, or None while Redis is out (slow, failed)."""
        if not plan.ranked or now < self._out_until:
            return None
        choice = await self._shared_choice(plan, now, lease, hints)
        return None if choice is None else plan.first(choice)

    async def _shared_choice(
        self, plan: Plan, now: float, lease: str | None = None, hints: dict[int, int] | None = None
    ) -> int | None:
        s = self.balancer.settings
        count_keys = [inflight_key(self.target, self.urls[i]) for i in plan.ranked]
        keys = [homes_key(self.target), *count_keys, *(block_key(self.target, h) for h in plan.hashes[:MAX_BLOCKS])]
        session = plan.ranked.index(plan.session) + 1 if plan.session in plan.ranked else 0
        args: list[Any] = [max(1, round(s.shared_ttl)), self.leases.lease_ms, lease or "", s.affinity_slack]
        args += [len(plan.ranked), session]
        for i in plan.ranked:
            state = self.balancer.replicas[i]
            args += [self.urls[i], state.extra(now, s.stale_after), state.batch, (hints or {}).get(i, 0)]
        began = time.monotonic()
        try:
            async with asyncio.timeout(s.shared_timeout_ms / 1000):
                choice, depth, deepest, *counts = await self._pick(keys=keys, args=args)
        except Exception as exc:  # slow, down or refusing: the local order serves, nothing waits on Redis
            now = time.monotonic()
            # Ours or the client's own (``redis.timeout_ms``): slow, not failing, so out for a moment only.
            slow = isinstance(exc, TimeoutError | RedisTimeoutError)
            out = SLOW_RETRY_SECONDS if slow else RETRY_SECONDS
            self._out_until = now + out
            self.fallbacks += 1
            self.balancer.report.fell_back("timeout" if slow else "error")
            if lease:  # the script may have run after all: its lease must not count until it runs out
                self.leases.forget(lease, count_keys)
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            throttled.warning(
                "unavailable",
                "shared prefix index unavailable (%s after %.0f ms); local routing for %.2g s",
                why,
                (now - began) * 1000,
                out,
            )
            return None
        replica = self._index.get(choice.decode() if isinstance(choice, bytes) else str(choice))
        own = {i: self.balancer.replicas[i].in_flight for i in plan.ranked}
        self._seen = (now, dict(zip(plan.ranked, counts, strict=True)), own)
        if lease and replica is not None:
            self.leases.held(lease, inflight_key(self.target, self.urls[replica]))
        self.hits += depth > 0
        self.yields += deepest > depth
        # vLLM's own depths (``hints``) decided, when the events router sent them
        if replica is not None:
            self.balancer.report.routed("events" if hints else "shared", outcome(plan, replica, depth, deepest))
        return replica

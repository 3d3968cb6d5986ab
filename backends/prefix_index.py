"""The prefix index every gateway replica shares (``balance.strategy: kv-shared``): per prompt block
hash, the replicas that served it and how often, in Redis, so that two gateways send a prompt's prefix
to the same vLLM replica instead of each learning its own, diverging map.

One Lua script per request, at choice time: it walks the prompt's blocks and, among the replicas the
balancer counts as near enough the least loaded, keeps the one holding the longest run; among equal
runs the one that served it most often (the prefix's home), then the session's replica, then the least
loaded (``balance.prefer``, the same choice the ``prefix`` strategy makes locally). It records every
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
Where a pool also reads vLLM's KV-cache events (``balance.kv_events``, ``backends/kv_router.py``), what
the engines report holding is asked first, and this index decides when the events do not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from backends.balance import HOME, Balancer, Plan
from gateway.core.pool_report import affinity
from gateway.core.request import InternalRequest

log = logging.getLogger("gateway.replicas")
RETRY_SECONDS = 2.0  # how long a failed Redis call keeps the shared index out
# How long a slow one does: a few requests' time, not seconds. Slow answers come in bursts when the
# gateway's own event loop stalls (on a crowded host the limits' Redis calls time out in the same
# milliseconds), which says nothing of Redis; a stalled Redis still costs only one wait per interval.
SLOW_RETRY_SECONDS = 0.25
MAX_BLOCKS = 256  # blocks looked up and recorded per request: bounds the script's work

# KEYS: the pool's homes (replica → new prefixes lately placed there, as ``PrefixIndex.homes``), then
# the prompt's block keys in order (one hash slot: the target's hash tag).
# ARGV: ttl seconds, how many of the candidates are eligible, then the available replicas: the eligible
# ones first, in ``Plan.candidates`` order, then the rest.
# Returns {the chosen replica, its cached depth, the deepest any available replica holds}: a choice
# shallower than the deepest is affinity yielding to load. The choice is ``balance.prefer``'s.
PICK = """
local eligible, ttl = tonumber(ARGV[2]), tonumber(ARGV[1])
local alive, depth, uses = {}, {}, {}
for i = 3, #ARGV do alive[#alive + 1] = ARGV[i] end
local deepest = 0
for k = 2, #KEYS do
  if #alive == 0 then break end
  local counts = redis.call('HMGET', KEYS[k], unpack(alive))
  local still = {}
  for j, r in ipairs(alive) do
    if counts[j] then
      still[#still + 1] = r
      depth[r], uses[r], deepest = k - 1, tonumber(counts[j]), k - 1
    end
  end
  alive = still
end
local homes = redis.call('HMGET', KEYS[1], unpack(ARGV, 3, 2 + eligible))
local choice, best = ARGV[3], {-1, -1, 0}
for i = 3, 2 + eligible do
  local r = ARGV[i]
  local score = {depth[r] or 0, uses[r] or 0, -(tonumber(homes[i - 2]) or 0)}
  for s = 1, 3 do
    if score[s] ~= best[s] then
      if score[s] > best[s] then choice, best = r, score end
      break
    end
  end
end
for k = 2, #KEYS do
  redis.call('HINCRBY', KEYS[k], choice, 1)
  redis.call('EXPIRE', KEYS[k], ttl)
end
if best[1] == 0 then
  local fade, all = 2 * (#ARGV - 2), redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local n = math.floor(tonumber(all[i + 1]) * (fade - 1) / fade)
    if n > 0 then redis.call('HSET', KEYS[1], all[i], n) else redis.call('HDEL', KEYS[1], all[i]) end
  end
  redis.call('HINCRBY', KEYS[1], choice, HOME)
end
redis.call('EXPIRE', KEYS[1], ttl)
return {choice, best[1], deepest}
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

    async def order(self, request: InternalRequest, session: str | None, now: float) -> tuple[list[int], list[int]]:
        plan = self.balancer.plan(request, session, now)
        return await self.choose(plan, now), plan.hashes

    async def choose(self, plan: Plan, now: float) -> list[int]:
        """The order for a plan already made (``kv_router`` falls back here without planning again)."""
        return self.balancer.local_order(plan)


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
        self._pick = client.register_script(PICK)
        self._out_until = 0.0
        self.hits = 0
        self.yields = 0
        self.fallbacks = 0

    async def order(self, request: InternalRequest, session: str | None, now: float) -> tuple[list[int], list[int]]:
        plan = self.balancer.plan(request, session, now)
        return await self.choose(plan, now), plan.hashes

    async def choose(self, plan: Plan, now: float) -> list[int]:
        """The order for a plan already made (``kv_router`` falls back here without planning again)."""
        if plan.hashes and plan.eligible and now >= self._out_until:
            choice = await self._shared_choice(plan)
            if choice is not None:
                return plan.first(choice)
        return self.balancer.local_order(plan)

    async def _shared_choice(self, plan: Plan) -> int | None:
        s = self.balancer.settings
        keys = [homes_key(self.target), *(block_key(self.target, h) for h in plan.hashes[:MAX_BLOCKS])]
        candidates = plan.candidates
        rest = [i for i in plan.ranked if i not in candidates]
        args = [max(1, round(s.shared_ttl)), len(candidates), *(self.urls[i] for i in candidates + rest)]
        began = time.monotonic()
        try:
            async with asyncio.timeout(s.shared_timeout_ms / 1000):
                choice, depth, deepest = await self._pick(keys=keys, args=args)
        except Exception as exc:  # slow, down or refusing: the local order serves, nothing waits on Redis
            now = time.monotonic()
            out = SLOW_RETRY_SECONDS if isinstance(exc, TimeoutError) else RETRY_SECONDS
            self._out_until = now + out
            self.fallbacks += 1
            self.balancer.report.fell_back("timeout" if isinstance(exc, TimeoutError) else "error")
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.warning(
                "shared prefix index unavailable (%s after %.0f ms); local routing for %.2g s",
                why,
                (now - began) * 1000,
                out,
            )
            return None
        replica = self._index.get(choice.decode() if isinstance(choice, bytes) else str(choice))
        self.hits += depth > 0
        self.yields += deepest > depth
        self.balancer.report.routed("shared", affinity(depth, deepest))
        return replica

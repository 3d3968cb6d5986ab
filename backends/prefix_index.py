"""The prefix index every gateway replica shares (``balance.strategy: kv-shared``): prompt block hash →
the replica that last served it, in Redis, so that two gateways send a prompt's prefix to the same
vLLM replica instead of each learning its own, diverging map.

One Lua script per request, at choice time: it walks the prompt's blocks to the longest run it knows,
keeps that replica if the balancer counts it among the ``eligible`` (near enough the least loaded),
else takes the session's replica (if any, and eligible), else the least loaded, and records every
block against the choice with a TTL (the bound on the index's size: unused prefixes expire).
Recording at choice time, not after the answer, is what llm-d's picker does too: the next request for
the same prefix, from any gateway, already finds it. A cached prefix outranks a session here: a
conversation's own turns are recorded where it runs, so they lead back to it anyway, while a session
that opens with a shared system prompt finds the replica already holding it.

Redis is never on the critical path for longer than ``shared_timeout_ms``: a slow or failed answer
falls back to the balancer's local order (``prefix``) and keeps Redis out for ``RETRY_SECONDS``.
Why not vLLM's KV-cache events (``--kv-events-config``): they name blocks by hashes of token ids, so
matching them needs the model's tokenizer (and chat template) in the gateway; see docs/vllm.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from backends.balance import Balancer, Plan
from gateway.core.request import InternalRequest

log = logging.getLogger("gateway.replicas")
RETRY_SECONDS = 2.0  # how long a failed or slow Redis answer keeps the shared index out
MAX_BLOCKS = 256  # blocks looked up and recorded per request: bounds the script's work

# KEYS: the prompt's block keys in order (one hash slot: the target's hash tag).
# ARGV: ttl seconds, the session's replica ("" if none), then the eligible replicas, best first.
# Returns {the chosen replica, how many leading blocks were found}.
PICK = """
local found, depth = nil, 0
for i, key in ipairs(KEYS) do
  local r = redis.call('GET', key)
  if not r then break end
  found, depth = r, i
end
local choice = ARGV[2]
if choice == '' then choice = ARGV[3] end
if found then
  for i = 3, #ARGV do
    if ARGV[i] == found then choice = found; break end
  end
end
local ttl = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  redis.call('SET', key, choice, 'EX', ttl)
end
return {choice, depth}
"""


class LocalRouter:
    """The balancer's own order: every strategy but ``kv-shared``, and ``kv-shared`` without Redis."""

    def __init__(self, balancer: Balancer) -> None:
        self.balancer = balancer

    async def order(self, request: InternalRequest, session: str | None, now: float) -> tuple[list[int], list[int]]:
        return self.balancer.order(request, session, now)


def router(balancer: Balancer, target: str, urls: list[str], client: Any | None) -> LocalRouter | SharedRouter:
    """The pool's router: ``client`` is the app's Redis client, if Redis is configured."""
    if client is not None and balancer.settings.strategy == "kv-shared":
        return SharedRouter(balancer, target, urls, client)
    return LocalRouter(balancer)


class SharedRouter:
    """The pool's order for one request: the shared index's choice first when Redis answers in time,
    the balancer's local order otherwise. ``hits`` (a cached prefix found) and ``fallbacks`` (Redis
    failed or was too slow) count what happened."""

    def __init__(self, balancer: Balancer, target: str, urls: list[str], client: Any) -> None:
        self.balancer = balancer
        self.urls = urls
        self._index = {url: i for i, url in enumerate(urls)}
        self._prefix = f"gw:prefix:{{{target}}}:"  # the hash tag keeps a pool's keys on one Cluster slot
        self._pick = client.register_script(PICK)
        self._out_until = 0.0
        self.hits = 0
        self.fallbacks = 0

    async def order(self, request: InternalRequest, session: str | None, now: float) -> tuple[list[int], list[int]]:
        plan = self.balancer.plan(request, session, now)
        if plan.hashes and plan.eligible and now >= self._out_until:
            choice = await self._shared_choice(plan)
            if choice is not None:
                return plan.first(choice), plan.hashes
        return self.balancer.local_order(plan), plan.hashes

    async def _shared_choice(self, plan: Plan) -> int | None:
        s = self.balancer.settings
        keys = [f"{self._prefix}{h:016x}" for h in plan.hashes[:MAX_BLOCKS]]
        session = self.urls[plan.sticky] if plan.sticky is not None else ""
        args = [max(1, round(s.shared_ttl)), session, *(self.urls[i] for i in plan.eligible)]
        try:
            async with asyncio.timeout(s.shared_timeout_ms / 1000):
                choice, depth = await self._pick(keys=keys, args=args)
        except Exception as exc:  # slow, down or refusing: the local order serves, nothing waits on Redis
            self._out_until = time.monotonic() + RETRY_SECONDS
            self.fallbacks += 1
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.warning("shared prefix index unavailable (%s); local routing for %.0f s", why, RETRY_SECONDS)
            return None
        replica = self._index.get(choice.decode() if isinstance(choice, bytes) else str(choice))
        if depth:
            self.hits += 1
        return replica

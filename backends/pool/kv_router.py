"""Routing on the KV cache vLLM reports holding (``balance.kv_events``): among the replicas near enough
the least loaded (affinity still yields to load), the one holding the deepest cached prefix of the
prompt, in blocks, goes first. With ``kv-shared`` the depths go to the shared index's script as hints,
so that load is every gateway's in-flight count there and the choice takes one round trip (ties: the
index's home, then the less loaded); otherwise the balancer's local loads decide who is eligible
(ties: the less loaded).

When the views cannot compare the replicas (the events are off, a publisher is not connected), or the
prompt cannot be tokenized the engine's way, or no eligible replica holds its first block, the pool's
other router decides: the shared Redis index (``kv-shared``), else the balancer's local order
(``backends/pool/prefix_index.py``). Every gateway replica subscribes to every vLLM replica's events, so
all of them score a prompt against the same view.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol

from backends.pool.balance import Balancer
from backends.pool.kv_events import PoolEvents, ReplicaView, chain_hashes
from backends.pool.prefix_index import LocalRouter, SharedRouter
from backends.pool.prompt_tokens import PromptTokens, prompt_chars
from gateway.core.request import InternalRequest
from gateway.runtime.config import ConfigError, KvEvents, Target
from gateway.runtime.throttle import LogThrottle

log = logging.getLogger("gateway.kv_events")
throttled = LogThrottle(log)  # lines a request can cause: one a period per kind
INLINE_CHARS = 4096  # longer prompts are tokenized on a thread (about 1 µs a token: benchmarks/kv_events.py)


class Router(Protocol):
    async def order(
        self, request: InternalRequest, session: str | None, now: float, lease: str | None = None
    ) -> tuple[list[int], list[int]]:
        """Replica indexes, best first, and the prompt's block hashes for the balancer's own index;
        ``lease``: the request's id in the shared in-flight counts (``backends/pool/inflight.py``)."""


def check(settings: KvEvents) -> str | None:
    """What is wrong with the tokenizer directory, or None."""
    if not (Path(settings.tokenizer) / "tokenizer.json").is_file():
        return f"tokenizer: no tokenizer.json in {settings.tokenizer}"
    return None


class EventsRouter:
    """The pool's order when vLLM's KV-cache events are configured. ``hits`` counts requests the events
    placed; ``fallbacks`` those the other router placed."""

    def __init__(self, balancer: Balancer, target: Target, name: str, fallback: LocalRouter | SharedRouter) -> None:
        settings = target.balance.kv_events
        assert settings is not None
        problem = check(settings)
        if problem is not None:
            raise ConfigError(f"balance.kv_events.{problem}")
        self.balancer = balancer
        self.fallback = fallback
        feeds = [balancer.report.feed(r.label) for r in balancer.replicas]
        self.events = PoolEvents(settings, list(target.replicas), name, feeds)
        self.prompts = PromptTokens(settings.tokenizer, settings.max_chars)
        self.hits = 0
        self.fallbacks = 0

    async def start(self) -> None:
        await self.events.start()

    async def close(self) -> None:
        await self.events.close()

    def views(self, replicas: list[int]) -> list[ReplicaView] | None:
        """The replicas' views, if the events can compare them: all live, something stored somewhere."""
        views = [self.events.views[i] for i in replicas]
        if views and all(v.live for v in views) and any(v.block_size is not None for v in views):
            return views
        return None

    async def tokens(self, request: InternalRequest) -> list[int] | None:
        """The prompt's tokens; a long one is tokenized on a thread (``tokenizers`` lets go of the GIL
        there), so that a 10 k-token prompt does not hold up the event loop for milliseconds."""
        if min(prompt_chars(request), self.prompts.max_chars) <= INLINE_CHARS:
            return self.prompts.tokens(request)
        return await asyncio.to_thread(self.prompts.tokens, request)

    async def order(
        self, request: InternalRequest, session: str | None, now: float, lease: str | None = None
    ) -> tuple[list[int], list[int]]:
        plan = self.balancer.plan(request, session, now)
        shared = self.fallback if isinstance(self.fallback, SharedRouter) else None
        # With the shared counts, any available replica may turn out eligible: all their views count.
        replicas = plan.ranked if shared is not None else plan.eligible
        hints = await self.hints(request, replicas)
        if shared is not None:
            chosen = await shared.shared_order(plan, now, lease, hints) or shared.recent_order(plan, now, hints)
            if chosen is not None:
                self.hits += hints is not None
                self.fallbacks += hints is None
                return chosen, plan.hashes
        held = [i for i in plan.eligible if (hints or {}).get(i, 0) > 0]
        if held:
            assert hints is not None
            # ``eligible`` is least loaded first, and max() keeps the first of equals
            self.hits += 1
            self.balancer.report.routed("events", "cached")
            return plan.first(max(held, key=hints.__getitem__)), plan.hashes
        # The shared index, if any, was asked above and is out: what is left is the balancer's own order.
        self.fallbacks += 1
        return self.balancer.local_order(plan), plan.hashes

    async def hints(self, request: InternalRequest, replicas: list[int]) -> dict[int, int] | None:
        """How many leading blocks of the prompt each of ``replicas`` holds, by the events; None when
        the views cannot tell or none holds the first block."""
        views = self.views(replicas)
        if views is None:
            return None
        try:
            tokens = await self.tokens(request)
        except Exception:  # the events only ever improve a choice: never fail a request over them
            throttled.exception("tokenizing", "tokenizing for kv-events routing failed; routed without them")
            return None
        if tokens is None:
            return None
        found = depths(views, tokens)
        return dict(zip(replicas, found, strict=True)) if max(found) > 0 else None


def depths(views: list[ReplicaView], tokens: list[int]) -> list[int]:
    """How many leading blocks of ``tokens`` each view holds."""
    hashes = {v.block_size: chain_hashes(tokens, v.block_size) for v in views if v.block_size is not None}
    return [v.depth(hashes[v.block_size]) if v.block_size is not None else 0 for v in views]

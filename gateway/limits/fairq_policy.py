"""Who waits in which class, with what weight: the config's ``priorities``, teams' ``weight`` and
``priority``, keys' ``priority``; and the models' queues, kept across reloads (``gateway.limits.fairq``).

A request's class is its key's default (its team's, else the first class); the ``X-Gateway-Priority``
header may lower it, never raise it: a higher class named there is held to the key's own. A class the
config does not list, or the header given twice, is the client's mistake, a 400 naming the header.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.core.errors import InvalidRequest
from gateway.limits.channel import ScriptChannel
from gateway.limits.fairq import PRIORITY_HEADER, ModelQueue, QueueSettings, Ticket
from gateway.limits.fairq_blocks import block_size
from gateway.limits.fairq_shared import Listener, Shared, SharedQueue
from gateway.runtime.config import GatewayConfig

UNLEARNED = 1_000_000  # ``capacity: auto`` before any replica has queued: no limit yet
OTHER_TEAM = "other"  # the metric label of a team the config does not name (keys issued at run time)


@dataclass(frozen=True, slots=True)
class FairPolicy:
    classes: tuple[str, ...] = ("interactive", "batch")
    weights: Mapping[str, float] = field(default_factory=dict)  # team → weight (1.0 unless configured)
    team_rank: Mapping[str, int] = field(default_factory=dict)  # team → its keys' default class
    key_rank: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (team, key) → the key's own
    queues: Mapping[str, QueueSettings] = field(default_factory=dict)  # model name → its queue
    lease_ttl: float = 30.0  # ``limits.lease_ttl``: a slot's lease in Redis, renewed every third of it
    closed: bool = False  # ``redis.on_failure.concurrency: closed``: 503 while Redis is out
    retry_seconds: float = 1.0  # ``redis.retry_seconds``: how long a failure keeps Redis out
    replicas: int = 1  # ``limits.replicas``: the gateways whose shares make the capacity while Redis is out

    def rank(self, team: str, key_id: str, asked: str | None) -> int:
        """The request's class: its key's default, lowered by ``asked``, never raised by it."""
        own = self.key_rank.get((team, key_id), self.team_rank.get(team, 0))
        if asked is None:
            return own
        try:
            wanted = self.classes.index(asked.strip())
        except ValueError:
            known = ", ".join(self.classes)
            raise InvalidRequest(
                f"{PRIORITY_HEADER}: unknown class {asked[:64]!r} (known: {known})", param=PRIORITY_HEADER
            ) from None
        return max(own, wanted)

    @staticmethod
    def asked(values: list[str]) -> str | None:
        """The class the header names: none, or its one value. Given twice it is a list (HTTP reads a
        repeated field as the values joined by commas), which no class is: the client's mistake."""
        if len(values) > 1:
            message = f"{PRIORITY_HEADER}: given {len(values)} times; name one class"
            raise InvalidRequest(message, param=PRIORITY_HEADER)
        return values[0] if values else None

    def ticket(self, rid: str, team: str, key_id: str, asked: str | None, deadline: float | None) -> Ticket:
        rank = self.rank(team, key_id, asked)
        label = team if team in self.weights else OTHER_TEAM
        return Ticket(rid, team, label, self.classes[rank], rank, self.weights.get(team, 1.0), deadline)


def fair_policy(config: GatewayConfig) -> FairPolicy:
    classes = config.priorities
    replicas = config.limits.replicas
    return FairPolicy(
        classes,
        {t.id: t.weight for t in config.teams},
        {t.id: classes.index(t.priority) for t in config.teams if t.priority is not None},
        {(t.id, k.id): classes.index(k.priority) for t in config.teams for k in t.keys if k.priority is not None},
        {
            m.name: reserved(
                settings(m.queue.capacity, m.queue.max_waiting, m.queue.timeout, m.queue.share, replicas),
                m.queue.reserve,
                m.queue.reserve_window,
            )
            for m in config.models
            if m.queue is not None
        },
        config.limits.lease_ttl,
        config.redis is not None and config.redis.on_failure.get("concurrency") == "closed",
        config.redis.retry_seconds if config.redis is not None else 1.0,
        replicas,
    )


def settings(capacity: int | str, max_waiting: int, timeout: float, share: int | None, replicas: int) -> QueueSettings:
    auto = capacity == "auto"
    slots = UNLEARNED if isinstance(capacity, str) else capacity
    share = share or math.ceil(slots / replicas)
    return QueueSettings(slots, max_waiting, timeout, share, auto, block=block_size(slots, replicas, 0))


def reserved(settings: QueueSettings, slots: int, window: float) -> QueueSettings:
    return dataclasses.replace(settings, reserve=slots, reserve_window=window)


def learned(settings: QueueSettings, capacity: int, replicas: int) -> QueueSettings:
    """``settings`` with a learned capacity, and the share and block that follow from it."""
    share, block = math.ceil(capacity / replicas), block_size(capacity, replicas, 0)
    return dataclasses.replace(settings, capacity=capacity, share=share, block=block)


class Gauged(Protocol):
    """A replica as its pool scrapes it (``backends/pool``): vLLM's running and waiting gauges."""

    running: float
    waiting: float
    scraped_at: float


class Learner:
    """``capacity: auto``: each replica's ceiling is what it ran at once when it last had requests
    waiting (vLLM's own queue: its batch or KV cache is full), raised when it runs more without
    queuing; the model's capacity is their sum, once a replica has queued (before that, no limit)."""

    def __init__(self) -> None:
        self.ceilings: dict[tuple[str, int], float] = {}  # (model, replica) → ceiling
        self.queued: set[str] = set()  # models one of whose replicas has queued

    def learn(self, model: str, replicas: list[Gauged], fresh_since: float) -> int | None:
        for i, r in enumerate(replicas):
            if r.scraped_at < fresh_since:
                continue
            key = (model, i)
            if r.waiting > 0:
                self.ceilings[key] = max(1.0, r.running)
                self.queued.add(model)
            elif r.running > self.ceilings.get(key, 0.0):
                self.ceilings[key] = r.running
        if model not in self.queued:
            return None
        return max(1, int(sum(c for (m, _), c in self.ceilings.items() if m == model)))


class FairQueues:
    """The models' queues: one per model with a ``queue``, its waiters and slots kept across reloads;
    shared through Redis when ``client`` is given."""

    def __init__(self, policy: FairPolicy | None = None, client: Any = None) -> None:
        self.policy = FairPolicy()
        self.client = client
        # one connection for every model's script calls (a cluster client: redis-py's own calls)
        self.calls = ScriptChannel(client) if hasattr(client, "connection_pool") else None
        self.queues: dict[str, ModelQueue] = {}
        if policy is not None:
            self.configure(policy)

    def configure(self, policy: FairPolicy) -> None:
        self.policy = policy
        queues: dict[str, ModelQueue] = {}
        for model, settings in policy.queues.items():
            queue = self.queues.get(model)
            if queue is None or len(queue.local.counts) != len(policy.classes):  # other classes: a fresh order
                queue = self.build(model, settings)
            else:
                if settings.auto and queue.settings.auto:  # what was learned stays until learned again
                    settings = learned(settings, queue.settings.capacity, policy.replicas)
                queue.reconfigure(settings)
            queues[model] = queue
        self.queues = queues

    def build(self, model: str, settings: QueueSettings) -> ModelQueue:
        classes = len(self.policy.classes)
        if self.client is None:
            return ModelQueue(model, settings, classes)
        policy = self.policy
        shared = Shared(self.client, model, classes, int(policy.lease_ttl * 1000), self.calls)
        return SharedQueue(model, settings, classes, shared, policy.closed, policy.retry_seconds)

    def learned(self, model: str, capacity: int, replicas: int) -> None:
        """A ``capacity: auto`` model's capacity, as ``Learner`` last learned it."""
        queue = self.queues.get(model)
        if queue is not None and queue.settings.auto and queue.settings.capacity != capacity:
            queue.reconfigure(learned(queue.settings, capacity, replicas))

    async def keeper(self) -> None:
        """Renews this gateway's slot leases, so only a dead gateway's run out."""
        while True:
            await asyncio.sleep(self.policy.lease_ttl / 3)
            for queue in list(self.queues.values()):
                if isinstance(queue, SharedQueue):
                    await queue.renew()


@contextlib.asynccontextmanager
async def running(fair: FairQueues) -> AsyncIterator[None]:
    """The listener of the queues' channel and the lease keeper, with Redis; nothing without."""
    if fair.client is None:
        yield
        return
    listener = Listener(fair.client, lambda: fair.queues)
    listener.start()
    keeper = asyncio.create_task(fair.keeper(), name="fair-queue-keeper")
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        for queue in fair.queues.values():  # spare block slots back, not stranded for a lease
            if isinstance(queue, SharedQueue):
                await queue.blocks.close()
        await listener.close()

"""An app's routing figures per replica pool: ``gateway.core.pool_report``'s protocols on tallies
(``gateway.obs.metrics``), so that a routing decision costs one dict lookup and one addition.

The app owns one ``Routing``; the composition root hands each pool ``Routing.pool``, which makes the
pool's tallies (every label child of its decisions and fallbacks, and of each replica's feed) when the
pool is built, and gives a pool rebuilt by a reload the same ones. Labels: the pool's target id and
its replicas' labels, both from the config, and the fixed sets of ``pool_report``. What does not belong
here: the replicas' scraped load (``metrics.ReplicaGaugeSet``), or any choosing.
"""

from __future__ import annotations

import time

from gateway.core.pool_report import (
    CAUSES,
    EVENT_KINDS,
    OUTCOMES,
    REPLAY_STEPS,
    SOURCES,
    Cause,
    EventKind,
    Outcome,
    ReplayStep,
    Source,
)
from gateway.obs import metrics as m


class FeedTallies:
    """One replica's events feed."""

    __slots__ = ("_blocks", "_connected", "_gaps", "_kinds", "_last", "_replays")

    def __init__(self, target: str, replica: str, owner: m.Tallies) -> None:
        self._connected = m.LevelTally(m.KV_EVENTS_CONNECTED.labels(target, replica), owner)
        self._last = m.LevelTally(m.KV_EVENTS_LAST_BATCH.labels(target, replica), owner)
        self._blocks = m.LevelTally(m.KV_EVENTS_BLOCKS.labels(target, replica), owner)
        self._gaps = m.CountTally(m.KV_EVENTS_GAPS.labels(target, replica), owner)
        self._kinds = {k: m.CountTally(m.KV_EVENTS.labels(target, replica, k), owner) for k in EVENT_KINDS}
        self._replays = {s: m.CountTally(m.KV_EVENTS_REPLAYS.labels(target, replica, s), owner) for s in REPLAY_STEPS}

    def connected(self, up: bool) -> None:
        self._connected.n = 1 if up else 0

    def heard(self) -> None:
        self._last.n = time.time()

    def applied(self, kind: EventKind) -> None:
        self._kinds[kind].n += 1

    def gap(self) -> None:
        self._gaps.n += 1

    def replay(self, step: ReplayStep) -> None:
        self._replays[step].n += 1

    def held(self, blocks: int) -> None:
        self._blocks.n = blocks


class PoolTallies:
    """One pool's decisions, fallbacks and feeds."""

    __slots__ = ("_fallbacks", "_feeds", "_owner", "_routed", "target")

    def __init__(self, target: str, owner: m.Tallies) -> None:
        self.target = target
        self._owner = owner
        # Every child made now: a series that appears with its first increment loses it to rate().
        self._routed = {(s, o): m.CountTally(m.ROUTED.labels(target, s, o), owner) for s in SOURCES for o in OUTCOMES}
        self._fallbacks = {c: m.CountTally(m.SHARED_FALLBACKS.labels(target, c), owner) for c in CAUSES}
        self._feeds: dict[str, FeedTallies] = {}

    def routed(self, source: Source, outcome: Outcome) -> None:
        self._routed[source, outcome].n += 1

    def fell_back(self, cause: Cause) -> None:
        self._fallbacks[cause].n += 1

    def feed(self, replica: str) -> FeedTallies:
        feed = self._feeds.get(replica)
        if feed is None:
            feed = self._feeds[replica] = FeedTallies(self.target, replica, self._owner)
        return feed


class Routing:
    """An app's pools' tallies, by target id; flushed with the app's others (``Gateway.tallies``)."""

    __slots__ = ("pools", "tallies")

    def __init__(self) -> None:
        self.pools: dict[str, PoolTallies] = {}
        self.tallies = m.Tallies()

    def pool(self, target: str) -> PoolTallies:
        pool = self.pools.get(target)
        if pool is None:
            pool = self.pools[target] = PoolTallies(target, self.tallies)
        return pool

"""Settlements Redis did not take, held until it answers again (``failover`` sends them with the next
batch): finished requests' leases (slots the team waits for) and usage.

Bounded: past ``CAPACITY`` settlements, all but the newest half of that are summed per team key and
usage hour into one settlement each, so usage and token corrections stay whole while the leases but one of each sum are
given up (they expire by their TTL, the oldest first). Only when the sums alone would not fit are the
oldest of them dropped, usage and all. What is given up is counted in
``gateway_limits_settlements_dropped_total``; nothing here talks to Redis."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from gateway.limits.limiter import Group, Settlement
from gateway.obs.metrics import LEASES_DROPPED, SETTLEMENTS_HELD, USAGE_DROPPED

CAPACITY = 20_000  # settlements held; a long outage costs this much memory and no more


def lease_only(items: Iterable[Settlement]) -> list[Settlement]:
    """The same requests' lease releases, without usage or token correction (both idempotent to send
    again: a lease is removed once)."""
    return [Settlement(s.plan, 0, 0, 0, 0) for s in items if s.plan.concurrency_keys]


class Backlog:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self.items: deque[Settlement] = deque()

    def __len__(self) -> int:
        return len(self.items)

    def add(self, items: Iterable[Settlement]) -> None:
        self.items.extend(items)
        if len(self.items) > self.capacity:
            self._fold()
        SETTLEMENTS_HELD.n = len(self.items)

    def take(self) -> list[Settlement]:
        """Everything held, oldest first; the caller adds back what fails again."""
        items = list(self.items)
        self.items.clear()
        SETTLEMENTS_HELD.n = 0
        return items

    def drop(self) -> None:
        """Give up everything held (shutting down with Redis unavailable)."""
        for s in self.take():
            USAGE_DROPPED.n += s.requests
            LEASES_DROPPED.n += 1 if s.plan.concurrency_keys else 0

    def _fold(self) -> None:
        old = [self.items.popleft() for _ in range(len(self.items) - self.capacity // 2)]
        sums: dict[Group, Settlement] = {}
        for s in old:
            same = s.group
            was = sums.get(same)
            if was is None:
                sums[same] = s
                continue
            # the sum keeps the first (oldest) settlement's plan and so its lease
            sums[same] = was.summed(s)
            LEASES_DROPPED.n += 1 if s.plan.concurrency_keys else 0
        folded = list(sums.values())
        over = len(folded) + len(self.items) - self.capacity
        if over > 0:  # more team keys than room, even summed: the oldest go
            for s in folded[:over]:
                USAGE_DROPPED.n += s.requests
                LEASES_DROPPED.n += 1 if s.plan.concurrency_keys else 0
            folded = folded[over:]
        self.items.extendleft(reversed(folded))

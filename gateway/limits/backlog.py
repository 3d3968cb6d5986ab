"""Settlements Redis did not take, held until it answers again (``failover`` sends them with the next
batch): finished requests' leases (slots the team waits for) and usage.

Bounded: past ``CAPACITY`` settlements, all but the newest half of that are summed per team key and
usage hour into one settlement each, so usage and token corrections stay whole while the leases but one of each sum are
given up (they expire by their TTL, the oldest first). Only when the sums alone would not fit are the
oldest of them dropped, usage and all. What is given up is counted in
``gateway_limits_settlements_dropped_total``; nothing here talks to Redis.

Beside them, ``calls``: settlements' script calls that went out and whose answer never came (they
may have run), kept whole to be sent again as they were, under their ids (``scripts.SETTLE``):
never summed. ``failover`` sends them alone and holds new settlements here until Redis has answered
them, so they are at most one round trip's calls, each given up once ``ONCE_HOLD_SECONDS`` old."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from gateway.limits.limiter import Group, SettleCall, Settlement
from gateway.obs.metrics import LEASES_DROPPED, SETTLEMENTS_HELD, USAGE_DROPPED, USAGE_UNKNOWN, CountTally

CAPACITY = 20_000  # settlements held; a long outage costs this much memory and no more


def lease_only(items: Iterable[Settlement]) -> list[Settlement]:
    """The same requests' lease releases, without usage or token correction (both idempotent to send
    again: a lease is removed once)."""
    return [Settlement(s.plan, 0, 0, 0, 0) for s in items if s.plan.concurrency_keys]


def given_up(settled: Iterable[Settlement], usage: CountTally) -> int:
    """Settlements no one will send: their requests counted in ``usage`` (``USAGE_DROPPED``, or
    ``USAGE_UNKNOWN`` where their call may have run), their leases as left to expire by their TTL.
    Answers the requests, for the caller's log line."""
    requests = leases = 0
    for s in settled:
        requests += s.requests
        leases += 1 if s.plan.concurrency_keys else 0
    usage.n += requests
    LEASES_DROPPED.n += leases
    return requests


class Backlog:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self.items: deque[Settlement] = deque()
        self.calls: list[SettleCall] = []

    def __len__(self) -> int:
        return len(self.items) + len(self.calls)

    def add(self, items: Iterable[Settlement]) -> None:
        self.items.extend(items)
        if len(self.items) > self.capacity:
            self._fold()
        SETTLEMENTS_HELD.n = len(self)

    def keep(self, call: SettleCall) -> None:
        """A call that may have run, to be sent again as it went out."""
        self.calls.append(call)
        SETTLEMENTS_HELD.n = len(self)

    def take(self) -> list[Settlement]:
        """The settlements held, oldest first; the caller adds back what fails again."""
        items = list(self.items)
        self.items.clear()
        SETTLEMENTS_HELD.n = len(self.calls)
        return items

    def take_calls(self) -> list[SettleCall]:
        """The calls kept whole, oldest first; the caller keeps again what fails again."""
        calls, self.calls = self.calls, []
        SETTLEMENTS_HELD.n = len(self.items)
        return calls

    def drop(self) -> None:
        """Give up everything held (shutting down with Redis unavailable); a call that may have run,
        as usage whose fate is unknown."""
        given_up([s for call in self.take_calls() for s in call.settled], USAGE_UNKNOWN)
        given_up(self.take(), USAGE_DROPPED)

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
            given_up(folded[:over], USAGE_DROPPED)
            folded = folded[over:]
        self.items.extendleft(reversed(folded))

"""Every gateway's in-flight requests per replica, counted in Redis (``balance.strategy: kv-shared``),
so that each gateway weighs a replica by what all of them sent it, not by a scraped snapshot.

The count is a sorted set per replica of leases (a request's id, scored by when its lease runs out, on
Redis's clock). ``backends/pool/prefix_index.py``'s script adds one to the replica it chooses, in the same
call that chooses, and drops the run-out ones before counting. This module keeps them honest, off the
request path: a finished request's lease is queued and removed by one task per pool (a burst of them
in one script call), and the leases of requests still running are renewed every third of
``shared_lease``. A gateway that dies, or a release lost to a Redis error, leaves leases that run out
within ``shared_lease``: a count is never stuck high, and never below zero (it is a set's size).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from gateway.runtime.throttle import LogThrottle

log = logging.getLogger("gateway.replicas")
throttled = LogThrottle(log)  # lines a Redis in trouble can cause per batch: one a period
KEEP_TIMEOUT = 2.0  # seconds one release or renewal call may take: a stalled Redis only delays them
RETRY_SECONDS = 0.1  # how soon failed releases are sent again (a lease left behind skews its replica's load)

# KEYS: one sorted set per lease (one hash slot: the target's hash tag); ARGV: the lease in ms, how many
# of the leases are released (the first ones), then the leases. The others are renewed, only where
# they still are (XX: a lease that ran out and was dropped stays dropped).
KEEP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease, gone = tonumber(ARGV[1]), tonumber(ARGV[2])
for k = 1, #KEYS do
  if k <= gone then
    redis.call('ZREM', KEYS[k], ARGV[2 + k])
  elseif redis.call('ZADD', KEYS[k], 'XX', 'CH', now + lease, ARGV[2 + k]) > 0 then
    redis.call('PEXPIRE', KEYS[k], 2 * lease)
  end
end
return #KEYS
"""


def inflight_key(target: str, url: str) -> str:
    """A replica's leases: the target's hash tag, as the prefix index's keys."""
    return f"gw:inflight:{{{target}}}:{url}"


class Leases:
    """This process's leases in one pool's counts: which set each is in, and the releases not yet sent."""

    def __init__(self, client: Any, lease_seconds: float) -> None:
        self.lease_ms = max(1, round(lease_seconds * 1000))
        self._keep = client.register_script(KEEP)
        self.live: dict[str, str] = {}  # lease → its replica's key
        self._gone: list[tuple[str, str, float]] = []  # (key, lease, when it was queued) to remove
        self._wake = asyncio.Event()
        self._sending = asyncio.Lock()  # one call at a time: a send returns once what it found is sent
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def held(self, lease: str, key: str) -> None:
        self.live[lease] = key

    def release(self, lease: str) -> None:
        """The request ended (or its replica failed it): out of the count at the next send."""
        key = self.live.pop(lease, None)
        if key is not None:
            self._gone.append((key, lease, time.monotonic()))
            self._wake.set()

    def forget(self, lease: str, keys: list[str]) -> None:
        """A choice whose answer never came (too slow): the script may have run, so the lease is
        removed wherever it could be."""
        now = time.monotonic()
        self._gone.extend((key, lease, now) for key in keys)
        self._wake.set()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="shared in-flight leases")

    async def close(self) -> None:
        """Stops the task once its call is done (cancelling a Redis call half way can leave the
        client's connection in a state that swallows the cancellation), then sends the rest."""
        task, self._task = self._task, None
        if task is not None:
            self._closing = True
            self._wake.set()
            await task
        for lease in list(self.live):
            self.release(lease)
        await self.send(renew=False)

    async def _run(self) -> None:
        every = self.lease_ms / 3000
        renew_at = time.monotonic() + every
        while not self._closing:
            wake_at = min(renew_at, time.monotonic() + RETRY_SECONDS) if self._gone else renew_at
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake_at - time.monotonic())):
                    await self._wake.wait()
            self._wake.clear()
            renew = time.monotonic() >= renew_at
            if renew:
                renew_at = time.monotonic() + every
            await self.send(renew)

    async def send(self, renew: bool) -> None:
        """The queued releases, and with ``renew`` the live leases' renewals, in one call. Releases that
        fail are queued again (removing twice is harmless) until their lease would have run out anyway;
        so are those of a call that was cancelled."""
        async with self._sending:
            gone, self._gone = self._gone, []
            live = list(self.live.items()) if renew else []
            if not gone and not live:
                return
            keys = [key for key, _, _ in gone] + [key for _, key in live]
            args = [self.lease_ms, len(gone), *(lease for _, lease, _ in gone), *(lease for lease, _ in live)]
            try:
                async with asyncio.timeout(KEEP_TIMEOUT):
                    await self._keep(keys=keys, args=args)
            except BaseException as exc:
                now = time.monotonic()
                self._gone[:0] = [g for g in gone if now - g[2] < self.lease_ms / 1000]
                if not isinstance(exc, Exception):
                    raise
                what = "shared in-flight counts: %d releases, %d renewals failed (%r)"
                throttled.warning("keep", what, len(gone), len(live), exc)

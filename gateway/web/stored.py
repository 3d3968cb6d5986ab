"""Stored Responses: ``store`` keeps a response and its input for ``previous_response_id`` and for
``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``.

One record per response, JSON: the response object, this turn's input items, and the chain's items
before them (so a chain is rebuilt from one read, for targets that keep no state). Records are kept
per team (another team's id is not found: 404), for ``responses.ttl_seconds``, and within
``responses.max_bytes_per_team`` (past it, the team's oldest go first). In Redis when one is
configured (shared by every gateway process, kept across restarts), in process otherwise. Redis out
of reach is a named 503 (``store_unavailable``) for a request that needs a stored response; a
response that could not be stored is still answered, and the failure logged.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any, Protocol

from gateway.core.errors import NotFound, StoreUnavailable
from gateway.core.request import InternalRequest
from gateway.dialects.common import dumps, loads
from gateway.dialects.responses import Turn, with_history
from gateway.limits.plan import tag
from gateway.runtime.config import ResponsesStore
from gateway.runtime.throttle import LogThrottle

JSON = Any
log = logging.getLogger("gateway.responses")
throttled = LogThrottle(log)  # lines a request can cause: one a period per kind


class Store(Protocol):
    async def put(self, team: str, rid: str, record: bytes) -> None: ...

    async def get(self, team: str, rid: str) -> bytes | None: ...

    async def delete(self, team: str, rid: str) -> bool: ...


class LocalStore:
    """Records in this process, per team in insertion order (the oldest go first past the cap)."""

    def __init__(self, settings: ResponsesStore) -> None:
        self.settings = settings
        self.teams: dict[str, OrderedDict[str, tuple[float, bytes]]] = {}
        self.sizes: dict[str, int] = {}

    async def put(self, team: str, rid: str, record: bytes) -> None:
        held = self.teams.setdefault(team, OrderedDict())
        self._drop(team, rid)
        held[rid] = (time.monotonic() + self.settings.ttl_seconds, record)
        self.sizes[team] = self.sizes.get(team, 0) + len(record)
        while self.sizes[team] > self.settings.max_bytes_per_team and held:
            self._drop(team, next(iter(held)))

    def _drop(self, team: str, rid: str) -> bool:
        held = self.teams.get(team)
        found = held.pop(rid, None) if held is not None else None
        if found is not None:
            self.sizes[team] -= len(found[1])
        return found is not None

    async def get(self, team: str, rid: str) -> bytes | None:
        held = self.teams.get(team)
        found = held.get(rid) if held is not None else None
        if found is None:
            return None
        if found[0] < time.monotonic():
            self._drop(team, rid)
            return None
        return found[1]

    async def delete(self, team: str, rid: str) -> bool:
        return self._drop(team, rid)


# One call: the record with its TTL, its size in the team's index (a sorted set by time, and a hash
# of sizes), expired entries swept from the index, then the oldest dropped while the team is over its
# cap. Every key carries the team's hash tag: one Cluster slot.
PUT = """
local ttl, cap, now = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('SET', KEYS[1], ARGV[2], 'PX', math.floor(ttl * 1000))
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], string.len(ARGV[2]))
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl)) do
  redis.call('ZREM', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
end
local total = 0
for _, size in ipairs(redis.call('HVALS', KEYS[3])) do total = total + tonumber(size) end
while total > cap do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not oldest then break end
  total = total - tonumber(redis.call('HGET', KEYS[3], oldest) or 0)
  redis.call('ZREM', KEYS[2], oldest)
  redis.call('HDEL', KEYS[3], oldest)
  redis.call('DEL', KEYS[4] .. oldest)
end
redis.call('PEXPIRE', KEYS[2], math.floor(ttl * 1000))
redis.call('PEXPIRE', KEYS[3], math.floor(ttl * 1000))
return total
"""
DELETE = """
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return redis.call('DEL', KEYS[1])
"""


class RedisStore:
    def __init__(self, client: Any, settings: ResponsesStore) -> None:
        self.client = client
        self.settings = settings
        self.put_script = client.register_script(PUT)
        self.delete_script = client.register_script(DELETE)

    @staticmethod
    def _keys(team: str, rid: str) -> list[str]:
        base = tag(team) + ":resp:"
        return [base + rid, base + "index", base + "sizes", base]

    async def put(self, team: str, rid: str, record: bytes) -> None:
        args = [rid, record, self.settings.ttl_seconds, self.settings.max_bytes_per_team, time.time()]
        await self.put_script(keys=self._keys(team, rid), args=args)

    async def get(self, team: str, rid: str) -> bytes | None:
        found: bytes | None = await self.client.get(self._keys(team, rid)[0])
        return found

    async def delete(self, team: str, rid: str) -> bool:
        return bool(await self.delete_script(keys=self._keys(team, rid)[:3], args=[rid]))


class Conversations:
    """The pipeline's side of the store: a chain recalled before a request, a response kept after."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self, team: str, rid: str, param: str | None) -> dict[str, JSON]:
        try:
            raw = await self.store.get(team, rid)
        except Exception as exc:  # Redis out of reach, a timeout: never a 500
            raise StoreUnavailable(
                f"the response store is unreachable ({type(exc).__name__}): stored responses cannot be read now",
                param=param,
            ) from None
        if raw is None:
            raise NotFound(f"response {rid!r} not found", param=param)
        record: dict[str, JSON] = loads(raw)
        return record

    async def recall(self, team: str, request: InternalRequest) -> InternalRequest:
        """The request continuing its ``previous_response_id``'s chain (one read), or as it is."""
        turn: Turn = request.reply
        if turn.previous is None:
            return request
        record = await self.read(team, turn.previous, "previous_response_id")
        history = record["history"] + record["input"] + record["response"]["output"]
        return with_history(request, history, record.get("upstream"))

    async def keep(self, team: str, request: InternalRequest) -> None:
        """Stores the answered response (``store`` not false); a failure is logged, not the client's."""
        turn: Turn = request.reply
        if not turn.store or turn.final is None:
            return
        kept: dict[str, JSON] = {"response": turn.final, "input": turn.input_items, "history": turn.history}
        if turn.upstream is not None:  # made by that provider's own /v1/responses (its id, its state)
            kept["upstream"] = turn.upstream
        record = dumps(kept)
        try:
            await self.store.put(team, turn.id, record)
        except Exception as exc:
            what = "response %s not stored (%s): it cannot be chained or retrieved"
            throttled.warning("not-stored", what, turn.id, type(exc).__name__)


def build(client: Any, settings: ResponsesStore) -> Conversations:
    return Conversations(RedisStore(client, settings) if client is not None else LocalStore(settings))

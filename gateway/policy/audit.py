"""The audit trail: who changed what, and when, for the admin API's changes (keys issued and
revoked) and config reloads (teams, keys and models added, removed or changed).

Each entry is one audit log line (``event: audit``, logger ``gateway.audit``) and one item of a
bounded list that ``GET /admin/audit`` shows: in Redis when configured (every worker and replica
appends to the same list), in this process otherwise. "Who" is a label, never a credential: the
first hex of the admin key's SHA-256, or what started a reload (``sighup``, ``watch``). Callers pass
no secret: ids, team names and counts only.

Not here: the admin API's routes and auth (``gateway/web/admin.py``).
"""

from __future__ import annotations

import collections
import json
import logging
import time
from typing import Any

from gateway.obs.logs import AUDIT_LOGGER, bounded_fields

log = logging.getLogger(AUDIT_LOGGER)
KEY = "llmgw:audit"
KEEP = 1000  # entries kept, newest first


class AuditTrail:
    def __init__(self, client: Any = None, keep: int = KEEP) -> None:
        self.client = client
        self.keep = keep
        self.local: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)

    async def record(self, who: str, action: str, **fields: Any) -> dict[str, Any]:
        """Logs the entry and adds it to the list; a Redis failure loses the list item, never the line."""
        entry = {
            "ts": time.time(),
            "admin": who,
            "action": action,
            **bounded_fields({k: v for k, v in fields.items() if v is not None}),
        }
        log.info("audit", extra={"fields": {"event": "audit", **{k: v for k, v in entry.items() if k != "ts"}}})
        if self.client is None:
            self.local.appendleft(entry)
            return entry
        try:
            await self.client.lpush(KEY, json.dumps(entry))  # two calls, not a pipeline: Cluster too
            await self.client.ltrim(KEY, 0, self.keep - 1)
        except Exception as exc:  # the log line above is the record of last resort
            logging.getLogger("gateway").warning("audit entry not stored in redis (%s)", type(exc).__name__)
        return entry

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` entries, newest first."""
        if self.client is None:
            return list(self.local)[:limit]
        raw = await self.client.lrange(KEY, 0, limit - 1)
        return [json.loads(item) for item in raw]

"""Team API keys issued at run time (admin API, ``llm-gateway keys``), next to the static keys of the
config file.

Format: ``gwk_<id>_<secret>``: the public id finds the record, only the SHA-256 of the whole key is
stored, and the comparison is constant-time. A record has its teams, an optional expiry and a revoked
flag. Records live in Redis (shared by every replica) or, with no Redis, in this process. A verified
record is cached for at most ``CACHE_SECONDS``, so a revocation holds on every replica within that.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from gateway.core.errors import AuthenticationFailed, GatewayError
from gateway.policy.auth import KeyRing, Principal, hex_digest, select_team

PREFIX = "gwk_"
CACHE_SECONDS = 1.0
KEY_ID_BYTES = 6  # an issued key's public id: this many random bytes, in hex
RECORD = "llmgw:key:"
INDEX = "llmgw:keyids"


class KeyStoreUnavailable(GatewayError):
    status = 503
    code = "key_store_unavailable"
    retryable = True


@dataclass
class KeyRecord:
    id: str
    digest: str
    teams: list[str]
    name: str = ""
    created: float = field(default_factory=time.time)
    expires: float | None = None
    revoked: bool = False

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("digest")
        return out


def new_key(teams: list[str], name: str = "", expires_in: float | None = None) -> tuple[str, KeyRecord]:
    key_id = secrets.token_hex(KEY_ID_BYTES)
    key = f"{PREFIX}{key_id}_{secrets.token_urlsafe(24)}"
    digest = hex_digest(key)
    expires = time.time() + expires_in if expires_in else None
    return key, KeyRecord(key_id, digest, teams, name, expires=expires)


class Store(Protocol):
    async def get(self, key_id: str) -> KeyRecord | None: ...

    async def put(self, record: KeyRecord) -> None: ...

    async def all(self) -> list[KeyRecord]: ...


class LocalStore:
    def __init__(self) -> None:
        self.records: dict[str, KeyRecord] = {}

    async def get(self, key_id: str) -> KeyRecord | None:
        return self.records.get(key_id)

    async def put(self, record: KeyRecord) -> None:
        self.records[record.id] = record

    async def all(self) -> list[KeyRecord]:
        return list(self.records.values())


class RedisStore:
    def __init__(self, client: Any) -> None:
        self.client = client

    async def get(self, key_id: str) -> KeyRecord | None:
        raw = await self.client.get(RECORD + key_id)
        return KeyRecord(**json.loads(raw)) if raw else None

    async def put(self, record: KeyRecord) -> None:
        await self.client.set(RECORD + record.id, json.dumps(asdict(record)))
        await self.client.sadd(INDEX, record.id)

    async def all(self) -> list[KeyRecord]:
        ids = sorted(i.decode() if isinstance(i, bytes) else i for i in await self.client.smembers(INDEX))
        records = [await self.get(i) for i in ids]
        return [r for r in records if r is not None]


def _is_key_id(text: str) -> bool:
    return len(text) == 2 * KEY_ID_BYTES and all(c in "0123456789abcdef" for c in text)


class Authenticator:
    """Static keys first (a dict look-up), then issued keys through a one-second cache."""

    def __init__(self, static: KeyRing, store: Store, teams: frozenset[str] | None = None) -> None:
        """``teams``: the configured team ids (None: any): an issued key outlives a config that
        removes one of its teams, and must not serve it after that."""
        self.static = static
        self.store = store
        self.teams = teams
        self.cache: dict[str, tuple[float, KeyRecord | None]] = {}

    async def authenticate(self, token: str | None, team: str | None) -> Principal:
        if self.static.open_access or not token or not token.startswith(PREFIX):
            return self.static.authenticate(token, team)
        key_id = token[len(PREFIX) :].split("_", 1)[0]
        # Only an id of the shape we issue is looked up: anything else (any bytes a header can carry)
        # is no issued key, and never reaches the store.
        record = await self._record(key_id) if _is_key_id(key_id) else None
        digest = hex_digest(token)
        if record is None or not hmac.compare_digest(record.digest, digest):
            return self.static.authenticate(token, team)  # may still be a static key of that shape
        if record.revoked:
            raise AuthenticationFailed("this API key was revoked")
        if record.expires is not None and record.expires < time.time():
            raise AuthenticationFailed("this API key has expired")
        teams = record.teams if self.teams is None else [t for t in record.teams if t in self.teams]
        if not teams:
            raise AuthenticationFailed("this API key's teams are no longer configured")
        return select_team(record.id, teams, team)

    async def _record(self, key_id: str) -> KeyRecord | None:
        now = time.monotonic()
        hit = self.cache.get(key_id)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        try:
            record = await self.store.get(key_id)
        except Exception as exc:  # Redis down: issued keys cannot be checked, static keys still work
            raise KeyStoreUnavailable(f"the key store is unavailable ({type(exc).__name__})") from None
        if len(self.cache) > 10_000:
            self.cache.clear()
        self.cache[key_id] = (now, record)
        return record

"""API-key authentication and team selection.

Keys are known only by their SHA-256 digest; a presented key is hashed and looked up, then compared
with ``hmac.compare_digest``. A key may belong to several teams; the dialect's team header
(``X-Friendli-Team``, ``x-selected-account-id``, ``OpenAI-Organization``) selects one, else the key's
first team. A key used for a team it does not belong to is refused with 403.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.core.errors import AuthenticationFailed, PermissionDenied
from gateway.core.records import record


def key_digest(token: str) -> bytes:
    """The SHA-256 of a presented key. A header may carry any bytes (aiohttp hands undecodable ones
    over as surrogates): they are hashed as sent, so such a key is simply unknown (401), never an error."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def hex_digest(token: str) -> str:
    return key_digest(token).hex()


@record
class Principal:
    key_id: str
    team: str


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    digest: bytes
    teams: tuple[str, ...]


def select_team(key_id: str, teams: Sequence[str], team: str | None) -> Principal:
    """The team the dialect's header asks for, if the key belongs to it; else the key's first team."""
    if team is None:
        return Principal(key_id, teams[0])
    if team not in teams:
        raise PermissionDenied(f"this API key is not a member of team {team!r}")
    return Principal(key_id, team)


ANONYMOUS = Principal(key_id="anonymous", team="default")


class KeyRing:
    def __init__(self, records: list[KeyRecord], *, open_access: bool = False) -> None:
        self._by_digest = {r.digest: r for r in records}
        self.open_access = open_access

    @classmethod
    def from_hashes(cls, entries: list[tuple[str, str, str]], *, open_access: bool = False) -> KeyRing:
        """``entries``: (team, key id, sha256 hex). The same digest under several teams is one key."""
        merged: dict[bytes, KeyRecord] = {}
        for team, key_id, hexdigest in entries:
            digest = bytes.fromhex(hexdigest)
            prev = merged.get(digest)
            teams = (*prev.teams, team) if prev else (team,)
            merged[digest] = KeyRecord(prev.key_id if prev else key_id, digest, teams)
        return cls(list(merged.values()), open_access=open_access)

    def __len__(self) -> int:
        return len(self._by_digest)

    def authenticate(self, token: str | None, team: str | None) -> Principal:
        if self.open_access:
            # No teams exist to select from; a client-chosen name must not become a label or limit key.
            return ANONYMOUS
        if not token:
            raise AuthenticationFailed("missing API key")
        digest = key_digest(token)
        record = self._by_digest.get(digest)
        if record is None or not hmac.compare_digest(record.digest, digest):
            raise AuthenticationFailed("invalid API key")
        return select_team(record.key_id, record.teams, team)

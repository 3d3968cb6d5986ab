"""The key digest the key ring and the key store look keys up by."""

from __future__ import annotations

import hashlib

from gateway.policy.auth import key_digest


def test_the_key_digest_is_sha256() -> None:
    for token in ("gw-bench-0123456789abcdef", "", "ключ", "x" * 1000):
        assert key_digest(token) == hashlib.sha256(token.encode()).digest()

"""A client's end-user id never makes an upstream refuse the request: Claude Code's ``metadata.user_id``
(159 characters) to every upstream kind, and an OpenAI client's ``user`` that is an email address to
Anthropic. The fake upstream's OpenAI and Anthropic wires refuse what their APIs refuse (a ``user``
over 64 characters; a ``user_id`` over 256 or like an email address)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.dialects.end_user import digest
from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BEARER, KEY

CLAUDE_CODE = "user_" + "ab12" * 16 + "_account_" + "0f6c1a52-3d4e-4f1a-9b2c-7d8e9f0a1b2c" + "_session_" + "5" * 36
MESSAGES = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


def sent_user(got: fake.RecordedRequest) -> str | None:
    return got.body.get("user") or (got.body.get("metadata") or {}).get("user_id")


@pytest.mark.parametrize("kind", fake.KINDS)
async def test_claude_codes_user_id_reaches_every_kind_within_its_bounds(
    gateway: GatewayFactory, upstream: Any, kind: str
) -> None:
    server = await upstream(kind)
    gw = await gateway(config([{"name": "m", "targets": [target(server, kind, passthrough=False)]}]))
    body = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    body["metadata"] = {"user_id": CLAUDE_CODE}
    for _ in range(2):  # the same id the same way each time: the upstream can tell its users apart
        async with gw.session.post(gw.url + "/v1/messages", json=body, headers=MESSAGES) as resp:
            assert resp.status == 200, await resp.text()
    first, second = (sent_user(r) for r in server.requests[-2:])
    assert first == second
    if kind == "anthropic":
        assert first == CLAUDE_CODE  # opaque, within 256 characters: as given
    elif kind.startswith("friendli"):
        assert first is None  # Friendli's API has no end-user field
    else:
        assert first == digest(CLAUDE_CODE) and len(first) <= 64


async def test_an_email_address_goes_to_anthropic_as_its_digest(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("anthropic")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "anthropic")]}]))
    body = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "user": "ada@example.com"}
    async with gw.session.post(gw.url + "/v1/chat/completions", json=body, headers=BEARER) as resp:
        assert resp.status == 200, await resp.text()
    assert sent_user(server.requests[-1]) == digest("ada@example.com")

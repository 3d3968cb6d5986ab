"""A client's end-user id, whatever its dialect allowed (up to 256 characters of anything), goes to every
wire within that wire's documented bounds: as given where it fits, else one stable digest of it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters import PROVIDERS, TRANSLATED
from gateway.core import caps
from gateway.core.request import ChatMessage, InternalRequest, Operation, Sampling
from gateway.dialects.end_user import ANTHROPIC_MAX, OPAQUE, OPENAI_MAX, anthropic_user, digest, openai_user

# Claude Code's metadata.user_id: its user's hash, account and session (159 characters)
CLAUDE_CODE = "user_" + "ab12" * 16 + "_account_" + "0f6c1a52-3d4e-4f1a-9b2c-7d8e9f0a1b2c" + "_session_" + "5" * 36
USERS = st.text(max_size=caps.MAX_NAME) | st.text("abc_-@.0123456789", max_size=caps.MAX_NAME)


@given(USERS)
def test_an_openai_shaped_user_fits_64_characters_and_is_stable(user: str) -> None:
    sent = openai_user(user)
    assert len(sent) <= OPENAI_MAX and sent == openai_user(user)
    assert (sent == user) is (len(user) <= OPENAI_MAX)


@given(USERS)
def test_an_anthropic_user_id_is_opaque_and_stable(user: str) -> None:
    sent = anthropic_user(user)
    assert len(sent) <= ANTHROPIC_MAX and OPAQUE.issuperset(sent) and "@" not in sent
    assert any(c.isalpha() for c in sent) and sent == anthropic_user(user)


@given(st.text(min_size=1), st.text(min_size=1))
def test_different_ids_have_different_digests(a: str, b: str) -> None:
    assert (digest(a) == digest(b)) is (a == b)


def test_claude_codes_id_goes_as_a_digest_to_openai_and_as_given_to_anthropic() -> None:
    assert len(CLAUDE_CODE) == 159
    assert openai_user(CLAUDE_CODE) == digest(CLAUDE_CODE) and len(digest(CLAUDE_CODE)) == 50
    assert anthropic_user(CLAUDE_CODE) == CLAUDE_CODE
    assert anthropic_user("ada@example.com") == digest("ada@example.com")
    assert anthropic_user("5551234567") == digest("5551234567")  # digits alone may read as a phone number


def sent_user(body: dict[str, Any]) -> str | None:
    return body.get("user") or (body.get("metadata") or {}).get("user_id")


WIRES = {**PROVIDERS, "anthropic-translated": TRANSLATED["anthropic"]}


@pytest.mark.parametrize("provider", list(WIRES))
@pytest.mark.parametrize("user", [CLAUDE_CODE, "ada@example.com", "u" * caps.MAX_NAME])
def test_every_wire_sends_the_id_within_its_bounds(provider: str, user: str) -> None:
    req = InternalRequest(
        Operation.CHAT, "m", messages=(ChatMessage("user", "hi"),), sampling=Sampling(max_tokens=4), user=user
    )
    sent = sent_user(WIRES[provider].encode(req, "up-model"))
    if provider == "friendli":  # Friendli's API has no end-user field: the id stays here
        assert sent is None
    elif provider.startswith("anthropic"):
        assert sent == anthropic_user(user)
    else:
        assert sent == openai_user(user)

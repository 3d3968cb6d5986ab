"""Every dialect's refusals in its own envelope: a wrong path under its prefix (or on a shared path, with
its SDK's headers), a wrong method on its routes, a malformed body. Each answer is checked for its
status, its envelope's exact keys (never another vendor's, never a 5xx) and a message that names the
path or the field as the client wrote it: no class of ours, no pydantic wording, and a block's index
as it stands in the client's body even when blocks only Anthropic takes come before it.

What does not belong here: the errors of a request that reaches an upstream (``test_client_errors``,
``test_ingress_errors``), the SDKs' own reading of these envelopes (``tests/sdk``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.runtime.config import hash_key, parse_config
from tests.integration.conftest import Gateway, GatewayFactory
from tests.integration.dialect_clients import ENVELOPES, KEY

JSON = Any
TEAM = "team1"
BEARER = {"Authorization": f"Bearer {KEY}"}
HEADERS = {  # what each vendor's SDK sends (tests/sdk/drivers)
    "openai": BEARER,
    "anthropic": {"x-api-key": KEY, "anthropic-version": "2023-06-01"},
    "friendli": {**BEARER, "X-Friendli-Team": TEAM},
    "sgp": {"x-api-key": KEY, "x-selected-account-id": TEAM},
    "octoai": {**BEARER, "X-Fern-SDK-Name": "octoai"},
}
# words a client must never read: pydantic's Python words and class names (ours end in these)
LEAKS = ("dictionary", "instance of", "discriminator", "Input tag", "Body", "Param", "Block", "Config")


# (the client's SDK, method, path, the methods the path allows: None where no route has it); the
# client's headers are its SDK's, so a shared path is told apart by them as a real client's would be
WRONG_PATHS = [
    ("anthropic", "POST", "/v1/messages/xyz", None),
    ("anthropic", "POST", "/v1/messages/batches", None),
    ("anthropic", "POST", "/v1/complete", None),
    ("anthropic", "GET", "/v1/files", None),  # a shared path: Anthropic's by its headers
    ("anthropic", "GET", "/v1/messages", "POST"),
    ("anthropic", "GET", "/v1/messages/count_tokens", "POST"),
    ("anthropic", "POST", "/v1/models/claude", "GET"),
    ("openai", "POST", "/v1/xyz", None),
    ("openai", "POST", "/v1/completions/x", None),
    ("openai", "GET", "/v1/chat/completions", "POST"),
    ("openai", "POST", "/v1/responses/r1/x/y", None),
    ("openai", "PUT", "/v1/responses/r1", "GET"),  # a templated route's methods
    ("openai", "POST", "/v1/responses/r1/input_items", "GET"),
    ("openai", "GET", "/v1/embeddings", "POST"),
    ("friendli", "POST", "/serverless/v1/xyz", None),
    ("friendli", "POST", "/serverless/tools/v1/chat/completions", None),
    ("friendli", "GET", "/dedicated/v1/completions", "POST"),
    ("friendli", "POST", "/serverless/v1/models/m", "GET"),
    ("friendli", "POST", "/v1/xyz", None),  # friendli-client's base: a shared path
    ("sgp", "POST", "/v4/xyz", None),
    ("sgp", "POST", "/v4/beta/xyz", None),
    ("sgp", "GET", "/v5/chat/completions", "POST"),
    ("sgp", "POST", "/v5/foo/bar", None),
    ("octoai", "POST", "/v1/xyz", None),
    ("octoai", "GET", "/v1/completions", "POST"),
]

TEXT = {"type": "text", "text": "hi"}
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}
TURN = [{"role": "user", "content": "hi"}]
MESSAGES = {"model": "demo", "max_tokens": 4}
# (the client's SDK, path, body, the status, what the message names)
MALFORMED = [
    ("openai", "/v1/completions", {"model": "demo", "prompt": "x", "max_tokens": "many"}, 400, "'max_tokens'"),
    ("openai", "/v1/chat/completions", {"model": "demo", "messages": [None]}, 400, "'messages[0]' must be an object"),
    ("openai", "/v1/responses", {"model": "demo", "input": "x", "text": True}, 400, "'text' must be an object"),
    ("openai", "/v1/embeddings", {"model": "demo", "input": {}}, 400, "'input'"),
    ("openai", "/v1/chat/completions", b"{not json", 400, "JSON"),
    ("friendli", "/serverless/v1/chat/completions", {"model": "demo", "messages": [3]}, 400, "'messages[0]'"),
    ("friendli", "/v1/completions", {"model": "demo", "prompt": "x", "num_beams": "x"}, 400, "'num_beams'"),
    ("sgp", "/v4/beta/chat/completions", {"model": "demo", "messages": [None]}, 422, "'messages[0]'"),
    ("sgp", "/v5/chat/completions", {"model": "demo", "messages": [{"role": "user", "content": 5}]}, 422, "[0]"),
    ("sgp", "/v5/completions", {"model": "demo", "prompt": "x", "max_tokens": "many"}, 422, "'max_tokens'"),
    ("octoai", "/v1/chat/completions", {"model": "demo", "messages": [None]}, 400, "'messages[0]' must be"),
    ("anthropic", "/v1/messages", MESSAGES | {"messages": [None]}, 400, "'messages[0]' must be an object"),
    ("anthropic", "/v1/messages", MESSAGES | {"messages": TURN, "thinking": True}, 400, "'thinking' must be"),
    ("anthropic", "/v1/messages", MESSAGES | {"messages": TURN, "system": [{"text": "s"}]}, 400, "'system[0].type'"),
    # blocks only Anthropic takes before the faulty one: the index is the client's
    (
        "anthropic",
        "/v1/messages",
        MESSAGES | {"messages": [{"role": "user", "content": [DOCUMENT, DOCUMENT, {"type": "text"}]}]},
        400,
        "'messages[0].content[2].text' is required",
    ),
    (
        "anthropic",
        "/v1/messages",
        MESSAGES | {"messages": [{"role": "user", "content": [DOCUMENT, TEXT, {"type": "text", "text": ""}]}]},
        400,
        "'messages[0].content[2].text' must not be empty",
    ),
    (
        "anthropic",
        "/v1/messages",
        MESSAGES | {"messages": [{"role": "assistant", "content": [DOCUMENT, {"type": "tool_result"}]}]},
        400,
        "'messages[0].content[1]",
    ),
    (
        "anthropic",
        "/v1/messages/count_tokens",
        {"model": "demo", "system": [DOCUMENT, {"type": "text", "text": 5}], "messages": TURN},
        400,
        "'system[1].text'",
    ),
]


@pytest.fixture
async def gw(gateway: GatewayFactory) -> Gateway:
    return await gateway(
        parse_config(
            {
                "models": [{"name": "demo", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 0}}]}],
                "teams": [{"id": TEAM, "keys": [{"id": "k", "sha256": hash_key(KEY)}]}],
            }
        )
    )


async def answered(gw: Gateway, sdk: str, method: str, path: str, body: JSON, status: int) -> str:
    """The message of the answer, once its status, headers and envelope are ``sdk``'s."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**HEADERS[sdk], "Content-Type": "application/json", "X-Request-Id": "rid-envelope"}
    async with gw.session.request(method, gw.url + path, data=data, headers=headers) as resp:
        answer = await resp.json()
        assert resp.status == status, (resp.status, answer)
        assert resp.content_type == "application/json" and resp.headers["X-Request-Id"] == "rid-envelope"
        if status == 405:
            assert method not in resp.headers["Allow"].split(", ")
    message = ENVELOPES[sdk](answer)
    assert not [w for w in LEAKS if w in message], message
    return message


@pytest.mark.parametrize(("sdk", "method", "path", "allowed"), WRONG_PATHS)
async def test_a_wrong_path_or_method_is_refused_in_the_envelope_of_the_dialect_that_owns_it(
    gw: Gateway, sdk: str, method: str, path: str, allowed: str | None
) -> None:
    """404 naming the path where no route has it; 405 naming the methods it allows."""
    if allowed is None:
        assert path in await answered(gw, sdk, method, path, {}, 404)
    else:
        assert allowed in await answered(gw, sdk, method, path, {}, 405)


@pytest.mark.parametrize(("sdk", "path", "body", "status", "named"), MALFORMED)
async def test_a_malformed_body_is_refused_in_the_dialects_envelope_naming_the_clients_field(
    gw: Gateway, sdk: str, path: str, body: JSON, status: int, named: str
) -> None:
    assert named in await answered(gw, sdk, "POST", path, body, status)

"""An upstream's refusal names the client's field: vLLM's context check names ``input_tokens`` (the
prompt's length, a field no client sends) when prompt and max_tokens pass the model's context; the
client is told ``max_tokens`` when it asked for a length, else its prompt, in its own envelope."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BEARER

FRIENDLI = {**BEARER, "X-Friendli-Team": "team1"}
TOO_LONG = 131_072  # past the fake vLLM's context (2048), within the gateway's own caps


@pytest.mark.parametrize(
    ("path", "headers", "body", "where"),
    [
        ("/v1/completions", BEARER, {"prompt": "hi", "max_tokens": TOO_LONG}, ("error", "param")),
        (
            "/v1/chat/completions",
            BEARER,
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": TOO_LONG},
            ("error", "param"),
        ),
        (
            "/serverless/v1/chat/completions",
            FRIENDLI,
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": TOO_LONG},
            ("error", "param"),
        ),
        ("/v1/completions", BEARER, {"prompt": "hi " * TOO_LONG}, ("error", "param")),
    ],
)
async def test_a_context_overflow_names_the_clients_field(
    gateway: GatewayFactory,
    upstream: Any,
    path: str,
    headers: dict[str, str],
    body: dict[str, Any],
    where: tuple[str, ...],
) -> None:
    server = await upstream("vllm")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "vllm")]}]))
    async with gw.session.post(gw.url + path, json={"model": "m", **body}, headers=headers) as resp:
        status, answer = resp.status, await resp.json()
    field = answer
    for key in where:
        field = field[key]
    assert status == 400, answer
    assert field == ("max_tokens" if "max_tokens" in body else "prompt"), answer

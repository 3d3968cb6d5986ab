"""``/metrics`` and ``/ready`` name teams, models and targets: with a metrics token configured
(``server.metrics_token_env``) only its holder sees them, while probes keep their status codes; without
one, both stay open as before. ``/health`` is open either way."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, config
from tests.integration.dialect_clients import BEARER

TOKEN = "metrics-token-0123456789"
VAR = "LLM_GATEWAY_METRICS_TOKEN"
MODEL, TARGET, TEAM = "secret-model", "secret-target", "team1"
NAMES = (MODEL, TARGET, TEAM)


def private_config(**server: Any) -> Any:
    return config([{"name": MODEL, "targets": [{"provider": "mock", "name": TARGET}]}], server=server)


@pytest.fixture
async def gw(gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A gateway holding the token, after one request of TEAM's to MODEL: every name is in its metrics."""
    monkeypatch.setenv(VAR, TOKEN)
    gw = await gateway(private_config())
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    async with gw.session.post(gw.url + "/v1/chat/completions", json=chat, headers=BEARER) as resp:
        assert resp.status == 200, await resp.text()
    return gw


async def get(gw: Any, path: str, token: str | None = None, scheme: str = "Bearer") -> tuple[int, str, Any]:
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    async with gw.session.get(gw.url + path, headers=headers) as resp:
        return resp.status, await resp.text(), resp.headers


async def raw_get(gw: Any, path: str, authorization: bytes) -> tuple[int, bytes]:
    """A GET over a bare socket whose Authorization header is the bytes given, which no client sends."""
    reader, writer = await asyncio.open_connection(gw.server.host, gw.server.port)
    head = [b"GET " + path.encode() + b" HTTP/1.0", b"Host: gw", b"Authorization: " + authorization]
    writer.write(b"\r\n".join(head) + b"\r\n\r\n")
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def test_metrics_answer_only_the_token(gw: Any) -> None:
    for token, scheme in [(None, "Bearer"), ("wrong", "Bearer"), (TOKEN[:-1], "Bearer"), (TOKEN, "Basic")]:
        status, body, headers = await get(gw, "/metrics", token, scheme)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), (token, scheme, status)
        assert not any(name in body for name in NAMES), body
    status, body, _ = await get(gw, "/metrics", TOKEN)
    assert status == 200 and all(name in body for name in NAMES), body


@pytest.mark.parametrize(
    ("sent", "status"),
    [
        (b"Bearer \xff", 401),
        (b"Bearer \xc3\x28", 401),
        (b"Bearer " + TOKEN.encode() + b"\xa0", 401),  # the token, then a byte that is no UTF-8
        (b"Bearer " + TOKEN.encode()[:-1] + b"\xff", 401),
        (b"\xff\xfe " + TOKEN.encode(), 401),  # no scheme UTF-8 can read
        (b"Bearer " + TOKEN.encode(), 200),  # the same path lets the token through
    ],
    ids=repr,
)
async def test_a_metrics_token_of_any_bytes_is_judged_not_crashed_on(gw: Any, sent: bytes, status: int) -> None:
    got, body = await raw_get(gw, "/metrics", sent)
    assert got == status, body
    assert (TARGET.encode() in body) == (status == 200)


async def test_ready_tells_probes_their_status_and_only_the_token_its_detail(gw: Any) -> None:
    for token in [None, "wrong"]:
        status, body, _ = await get(gw, "/ready", token)
        assert (status, json.loads(body)) == (200, {"ready": True}), body
    status, body, _ = await get(gw, "/ready", TOKEN)
    assert status == 200 and json.loads(body)["detail"] == {MODEL: {TARGET: True}}, body
    gw.server.app[GATEWAY].draining = True  # a status that changes is told without the token too
    status, body, _ = await get(gw, "/ready")
    assert (status, json.loads(body)) == (503, {"ready": False}), body
    status, body, _ = await get(gw, "/ready", TOKEN)
    assert status == 503 and json.loads(body)["draining"] is True and MODEL in body, body


async def test_health_stays_open(gw: Any) -> None:
    assert (await get(gw, "/health"))[0] == 200


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
async def test_without_a_token_both_stay_open(
    gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    """The default, for loopback and trusted networks: no header asked, every name shown."""
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)
    gw = await gateway(private_config())
    status, body, _ = await get(gw, "/metrics")
    assert status == 200 and TARGET in body
    status, body, _ = await get(gw, "/ready")
    assert status == 200 and MODEL in body and TARGET in body and '"limits"' in body


async def test_the_config_names_the_variable_and_the_token_is_never_logged(
    gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPS_METRICS_TOKEN", TOKEN)
    monkeypatch.setenv(VAR, "not-this-one")  # the default variable, no longer the one read
    with caplog.at_level(logging.DEBUG):
        gw = await gateway(private_config(metrics_token_env="OPS_METRICS_TOKEN"))
        assert (await get(gw, "/metrics", "not-this-one"))[0] == 401
        assert (await get(gw, "/metrics", TOKEN))[0] == 200
    assert "OPS_METRICS_TOKEN" in caplog.text and TOKEN not in caplog.text

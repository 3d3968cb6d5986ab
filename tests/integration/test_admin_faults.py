"""The admin API under faults and hostile numbers: every admin path answers below 500 with Redis down
(503 naming what is unavailable), a number that cannot be a date is refused by name and nothing is
stored, and no traceback is logged on the way."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.runtime.config import hash_key
from tests.integration.conftest import GatewayFactory, config, target
from tests.redis_servers import RedisServer

ADMIN = "admin-key-for-faults"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}
# One call per admin route (method, path, body); the test checks this list covers the route table.
CALLS: list[tuple[str, str, Any]] = [
    ("POST", "/admin/keys", {"teams": ["team1"], "name": "k"}),
    ("GET", "/admin/keys", None),
    ("DELETE", "/admin/keys/0123456789ab", None),
    ("GET", "/admin/teams", None),
    ("GET", "/admin/teams/team1/usage", None),
    ("POST", "/admin/reload", None),
    ("GET", "/admin/audit", None),
    ("GET", "/admin/spend", None),
]


@pytest.fixture
def stopped_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()


def admin_config(up: Any, redis_url: str | None) -> Any:
    extra: dict[str, Any] = {"admin": {"key_sha256": hash_key(ADMIN)}}
    if redis_url:
        extra["redis"] = {"url": redis_url}
    models = [{"name": "m", "targets": [target(up, "openai")]}]
    return config(models, **extra)


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_every_admin_path_answers_503_by_name_with_redis_down(
    gateway: GatewayFactory, upstream: Any, stopped_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    up = await upstream("openai", models=["up"])
    gw = await gateway(admin_config(up, stopped_redis.url))
    routes = {
        (r.method, r.resource.canonical)  # type: ignore[union-attr]
        for r in gw.server.app.router.routes()
        if r.resource is not None and r.resource.canonical.startswith("/admin") and r.method != "HEAD"
    }
    covered = {(m, p.replace("0123456789ab", "{key_id}").replace("team1", "{team}")) for m, p, _ in CALLS}
    assert routes <= covered, f"admin routes without a fault case: {routes - covered}"
    stopped_redis.stop()
    for method, path, body in CALLS:
        async with gw.session.request(method, gw.url + path, json=body, headers=HEADERS) as resp:
            text = await resp.text()
            assert resp.status < 500 or resp.status == 503, (path, resp.status, text)
            if path != "/admin/reload" and path != "/admin/teams":  # these two read no Redis
                assert resp.status == 503, (method, path, resp.status, text)
                assert "unavailable" in json.loads(text)["error"]["message"], text
    assert not tracebacks(caplog)


@pytest.mark.parametrize("expires_in", ["1e400", "1e308", "-1e400", "NaN", "Infinity", "1e10"])
async def test_an_expiry_that_is_no_date_is_refused_by_name_and_nothing_is_stored(
    gateway: GatewayFactory, upstream: Any, expires_in: str, caplog: pytest.LogCaptureFixture
) -> None:
    up = await upstream("openai", models=["up"])
    gw = await gateway(admin_config(up, None))
    body = '{"teams": ["team1"], "name": "n", "expires_in": ' + expires_in + "}"
    headers = {**HEADERS, "Content-Type": "application/json"}
    async with gw.session.post(gw.url + "/admin/keys", data=body, headers=headers) as resp:
        assert resp.status == 400, await resp.text()
        assert "expires_in" in (await resp.json())["error"]["message"]
    async with gw.session.get(gw.url + "/admin/keys", headers=HEADERS) as resp:
        assert (await resp.json())["keys"] == []
    async with gw.session.get(gw.url + "/admin/audit", headers=HEADERS) as resp:
        assert (await resp.json())["entries"] == []
    assert not tracebacks(caplog)


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("name", {"teams": ["team1"], "name": "x" * 1_000_000}),
        ("teams.0", {"teams": ["team1" * 100_000]}),
        ("teams", {"teams": ["team1"] * 100_000}),
    ],
)
async def test_oversized_key_fields_are_refused_by_name(
    gateway: GatewayFactory, upstream: Any, field: str, body: Any
) -> None:
    up = await upstream("openai", models=["up"])
    gw = await gateway(admin_config(up, None))
    async with gw.session.post(gw.url + "/admin/keys", json=body, headers=HEADERS) as resp:
        assert resp.status == 400, await resp.text()
        assert (await resp.json())["error"]["message"].startswith(f"{field}:")
    async with gw.session.get(gw.url + "/admin/keys", headers=HEADERS) as resp:
        assert (await resp.json())["keys"] == []


@pytest.mark.parametrize(
    "number", ["1e400", "1e308", "NaN", "-1", "0", "99999999999999999999999", "9" * 5000, "1.5", ""]
)
async def test_every_numeric_query_of_the_admin_api_is_a_4xx_or_clamped_never_a_500(
    gateway: GatewayFactory, upstream: Any, number: str, caplog: pytest.LogCaptureFixture
) -> None:
    up = await upstream("openai", models=["up"])
    gw = await gateway(admin_config(up, None))
    for path in (f"/admin/teams/team1/usage?hours={number}", f"/admin/audit?limit={number}"):
        async with gw.session.get(gw.url + path, headers=HEADERS) as resp:
            assert resp.status in (200, 400), (path, resp.status, await resp.text())
            if resp.status == 400:
                assert path.split("?")[1].split("=")[0] in (await resp.json())["error"]["message"]
    assert not tracebacks(caplog)

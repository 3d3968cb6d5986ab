"""Errors for clients, hints for operators: a client's error names the model or target and the failure's
class in its dialect's JSON envelope, never an internal address or a command to run; the operator's
hint goes to the request's log line and ``/status``. Every answer, errors included, carries
``X-Request-Id`` and ``X-Gateway-Overhead-Ms``; a wrong path or method is a JSON 404 or 405 too."""

from __future__ import annotations

import base64
import logging
import re
from typing import Any

import pytest
from aiohttp import web

from gateway.obs import logs
from gateway.runtime.config import hash_key, parse_config
from gateway.web.app import create_app
from gateway.web.pipeline import OVERHEAD_HEADER
from gateway.web.status import NO_MODEL
from tests.integration.conftest import Gateway, GatewayFactory
from tests.integration.dialect_clients import KEY
from tests.redis_servers import free_port
from tests.support.waiting import eventually

ADMIN = "client-errors-admin"
CAP = 4096


def config(closed: str) -> dict[str, Any]:
    return {
        "models": [
            {"name": "demo", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 0}}]},
            {"name": "gone", "targets": [{"provider": "vllm", "base_url": closed, "name": "gpu-box"}]},
        ],
        "teams": [
            {"id": "t", "keys": [{"id": "k", "sha256": hash_key(KEY)}], "budget": {"amount": 5, "period": "day"}}
        ],
        "spend": {"prices": [{"model": "demo", "input": 1000, "output": 3000}]},
        "admin": {"key_sha256": hash_key(ADMIN)},
        "server": {"max_body_bytes": CAP},
    }


@pytest.fixture
async def gw(gateway: GatewayFactory) -> tuple[Gateway, str]:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    return await gateway(parse_config(config(closed))), closed


AUTH = {"Authorization": f"Bearer {KEY}"}


async def test_an_unreachable_target_is_named_to_the_client_and_explained_to_the_operator(
    gw: tuple[Gateway, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=logs.ACCESS_LOGGER)
    g, closed = gw
    body = {"model": "gone", "messages": [{"role": "user", "content": "hi"}]}
    headers = {**AUTH, "X-Request-Id": "rid-gone"}
    async with g.session.post(g.url + "/v1/chat/completions", json=body, headers=headers) as resp:
        answer = await resp.json()
        assert resp.status == 502 and OVERHEAD_HEADER in resp.headers
    message = answer["error"]["message"]
    assert "'gpu-box'" in message and "unreachable" in message and "connection refused" in message
    operator_only = ("http", "127.0.0.1", closed.split(":")[2].split("/")[0], "vllm serve", "--config", "base_url")
    for internal in operator_only:
        assert internal not in str(answer), answer  # not in the message, nor anywhere else in the answer
    # the operator's side: where, and what to do (the target is in a config file: fix its base_url)
    hint = f"nothing listens at {closed}: start a model server there (`vllm serve MODEL --port"
    assert hint in (await request_line(caplog, "rid-gone"))["hint"]
    page = await status_page(g)
    assert f"nothing listens at {closed}" in page and "vllm serve MODEL" in page and "base_url in the config" in page


async def request_line(caplog: pytest.LogCaptureFixture, rid: str) -> dict[str, Any]:
    """The request's access log line, once written (lines go out in batches, just after the answer)."""

    def line() -> dict[str, Any] | None:
        fields = [getattr(r, "fields", {}) for r in caplog.records if r.name == logs.ACCESS_LOGGER]
        return next((f for f in fields if f.get("request_id") == rid), None)

    found: dict[str, Any] = await eventually(line, f"the log line of {rid}")
    return found


async def status_page(g: Gateway) -> str:
    basic = base64.b64encode(f"admin:{ADMIN}".encode()).decode()
    async with g.session.get(g.url + "/status", headers={"Authorization": f"Basic {basic}"}) as resp:
        assert resp.status == 200
        return await resp.text()


async def test_the_status_page_shows_utilisation_in_percent_and_labels_the_modelless_row(
    gw: tuple[Gateway, str],
) -> None:
    g, _ = gw
    body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    async with g.session.post(g.url + "/v1/chat/completions", json=body, headers=AUTH) as resp:
        assert resp.status == 200
    async with g.session.post(g.url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 401  # refused before a model was chosen

    async def counted() -> bool:  # request metrics are made in batches, just after the answer
        return NO_MODEL in await status_page(g)

    await eventually(counted, "the request was counted")
    page = await status_page(g)
    assert "<tr><td>-</td>" not in page  # no bare "-" row
    (utilisation,) = re.findall(r"<tr><td>t</td>(?:<td>[^<]*</td>){4}<td>([^<]*)</td>", page)
    assert re.fullmatch(r"\d+\.\d%", utilisation), utilisation


@pytest.mark.parametrize(
    ("method", "path", "status", "envelope"),
    [
        ("GET", "/v1/chat/completion", 404, lambda b: b["error"]["code"] == "not_found"),
        ("GET", "/v1/chat/completions", 405, lambda b: b["error"]["code"] == "method_not_allowed"),
        ("POST", "/v5/chat/complete", 404, lambda b: "no such path" in b["detail"]),  # SGP's envelope
        ("PUT", "/v1/messages", 405, lambda b: b["type"] == "error" and "POST" in b["error"]["message"]),
        ("DELETE", "/nothing/here", 404, lambda b: "DELETE /nothing/here" in b["error"]["message"]),
    ],
)
async def test_a_wrong_path_or_method_gets_json_in_the_paths_dialect(
    gw: tuple[Gateway, str], method: str, path: str, status: int, envelope: Any
) -> None:
    g, _ = gw
    async with g.session.request(method, g.url + path, headers={"X-Request-Id": "rid-1"}) as resp:
        assert resp.status == status and resp.content_type == "application/json"
        assert resp.headers["X-Request-Id"] == "rid-1" and OVERHEAD_HEADER in resp.headers
        assert envelope(await resp.json())
        if status == 405:
            assert "POST" in resp.headers["Allow"].split(", ")


async def test_every_error_carries_the_overhead_and_a_413_states_the_cap(gw: tuple[Gateway, str]) -> None:
    g, _ = gw
    body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
    async with g.session.post(g.url + "/v1/chat/completions", json=body) as resp:  # no key
        assert resp.status == 401 and float(resp.headers[OVERHEAD_HEADER]) >= 0
    big = {"model": "demo", "messages": [{"role": "user", "content": "x" * (2 * CAP)}]}
    async with g.session.post(g.url + "/v1/chat/completions", json=big, headers=AUTH) as resp:
        answer = await resp.json()
        assert resp.status == 413 and OVERHEAD_HEADER in resp.headers
    assert f"larger than {CAP} bytes (server.max_body_bytes)" in answer["error"]["message"]
    async with g.session.post(g.url + "/v1/chat/completions", json=body, headers=AUTH) as resp:
        assert resp.status == 200 and OVERHEAD_HEADER in resp.headers


def test_the_catch_all_route_is_the_last_one() -> None:
    """Routes added after it would never be reached."""
    app = create_app(parse_config(config("http://127.0.0.1:9/v1")))
    routes = list(app.router.routes())
    assert routes[-1].method == "*" and routes[-1].resource is not None
    assert routes[-1].resource.canonical == "/{path}"
    assert all(r.method != "*" for r in routes[:-1])
    assert isinstance(app, web.Application)

"""A model's queue through the gateway (in process, no Redis): requests beyond its capacity wait in
the gateway, not in the upstream; a full queue's refusal is a 429 with Retry-After in every ingress
dialect; an unknown class is a 400 naming the header in every dialect; a client gone while queued
leaves at once; the metrics say it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.runtime.config import hash_key, parse_config
from gateway.web.state import GATEWAY
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.dialect_clients import BY_NAME, INGRESSES, KEY, Ingress
from tests.support import eventually

HOLD = "[[fault:hang_before=60]]"  # holds its slot until its client goes


ADMIN = "fair-admin-key"


def queued(server: Any, capacity: int = 1, max_waiting: int = 1) -> Any:
    queue = {"capacity": capacity, "max_waiting": max_waiting, "timeout": 60}
    models = [{"name": "m", "targets": [target(server, "openai")], "queue": queue}]
    return config(models, admin={"key_sha256": hash_key(ADMIN)})


def with_header(ingress: Ingress, name: str, value: str) -> Ingress:
    return Ingress(ingress.name, ingress.path, {**ingress.headers, name: value}, ingress.extra, ingress.done)


async def metrics(gw: Any) -> str:
    async with gw.session.get(gw.url + "/metrics") as resp:
        return await resp.text()


async def test_beyond_capacity_requests_wait_in_the_gateway_and_a_full_queue_is_429_in_every_dialect(
    gateway: GatewayFactory, upstream: Any
) -> None:
    server = await upstream("openai")
    gw = await gateway(queued(server))
    holder = asyncio.create_task(gw.send(BY_NAME["openai"], "m", HOLD, False))
    await eventually(lambda: server.active == 1, "the first request at the upstream")
    waiter = asyncio.create_task(gw.send(BY_NAME["openai"], "m", "second", False))
    fair = gw.server.app[GATEWAY].fair.queues["m"]
    await eventually(lambda: fair.local.waiting == 1, "the second request queued")
    for ingress in INGRESSES:
        answer = await gw.send(ingress, "m", "third", False)
        assert answer.status == 429, (ingress.name, answer.raw)
        assert b"capacity" in answer.raw and b"queue is full" in answer.raw, ingress.name
    assert server.active == 1  # nothing beyond the capacity reached the upstream
    text = await metrics(gw)
    assert 'gateway_fair_waiting{class="interactive",model="m",team="team1"} 1.0' in text
    assert 'gateway_fair_slots{model="m"} 1.0' in text and 'gateway_fair_capacity{model="m"} 1.0' in text
    async with gw.session.get(gw.url + "/status", headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
        page = await resp.text()
    assert "<h2>Queues per model</h2>" in page
    assert "<td>m</td><td>1</td><td>1</td><td>interactive: 1</td><td>full: 6</td>" in page
    holder.cancel()  # its client goes: the slot frees, the waiter takes it
    assert (await waiter).status == 200
    text = await metrics(gw)
    assert 'gateway_fair_shed_total{class="interactive",model="m",reason="full",team="team1"}' in text
    assert "gateway_fair_wait_seconds_count" in text


async def test_retry_after_and_the_queue_header_come_with_the_refusal(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai")
    gw = await gateway(queued(server, max_waiting=0))
    holder = asyncio.create_task(gw.send(BY_NAME["openai"], "m", HOLD, False))
    await eventually(lambda: server.active == 1, "the first request at the upstream")
    path, headers, body = BY_NAME["openai"].request("m", "x", False)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 429
        assert int(resp.headers["Retry-After"]) >= 1
        assert resp.headers["X-Gateway-Queue"] == "shed-full"
    holder.cancel()


@pytest.mark.parametrize("ingress", INGRESSES, ids=lambda i: i.name)
async def test_an_unknown_class_is_a_400_naming_the_header(
    gateway: GatewayFactory, upstream: Any, ingress: Ingress
) -> None:
    server = await upstream("openai")
    gw = await gateway(queued(server))
    answer = await gw.send(with_header(ingress, "X-Gateway-Priority", "urgent"), "m", "x", False)
    assert answer.status == (422 if ingress.name.startswith("sgp") else 400), answer.raw  # SGP's own 422
    assert b"X-Gateway-Priority" in answer.raw and b"urgent" in answer.raw
    assert server.active == 0


async def test_a_client_gone_while_queued_leaves_the_queue_at_once(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai")
    gw = await gateway(queued(server, max_waiting=1))
    holder = asyncio.create_task(gw.send(BY_NAME["openai"], "m", HOLD, False))
    await eventually(lambda: server.active == 1, "the first request at the upstream")
    fair = gw.server.app[GATEWAY].fair.queues["m"]
    gone = asyncio.create_task(gw.send(BY_NAME["openai"], "m", "gone", False))
    await eventually(lambda: fair.local.waiting == 1, "the second request queued")
    gone.cancel()
    await eventually(lambda: fair.local.waiting == 0, "the gone client's request out of the queue")
    holder.cancel()
    await eventually(lambda: fair.local.running == 0, "every slot given back")
    assert (await gw.send(BY_NAME["openai"], "m", "after", False)).status == 200
    assert not any("gone" in str(r.body) for r in server.requests)  # it never reached the upstream


async def test_auto_capacity_is_learned_from_the_replicas_gauges(gateway: GatewayFactory, replicas: list[Any]) -> None:
    pool = {
        "provider": "vllm",
        "replicas": [r.url for r in replicas],
        "model": "tiny",
        "balance": {"scrape_interval": 0.1},
    }
    gw = await gateway(config([{"name": "m", "targets": [pool], "queue": {"capacity": "auto"}}]))
    fair = gw.server.app[GATEWAY].fair.queues["m"]
    assert (await gw.send(BY_NAME["openai"], "m", "before", False)).status == 200  # no limit yet
    replicas[0].state.waiting = 1  # replica 0 queues while running nothing: its ceiling is 1
    await eventually(lambda: fair.settings.capacity == 1, "the capacity learned from the replicas' gauges")
    holder = asyncio.create_task(gw.send(BY_NAME["openai"], "m", HOLD, False))
    await eventually(lambda: fair.local.running == 1, "the one slot held")
    waiter = asyncio.create_task(gw.send(BY_NAME["openai"], "m", "after", False))
    await eventually(lambda: fair.local.waiting == 1, "the next request waiting in the gateway")
    holder.cancel()
    assert (await waiter).status == 200


async def test_the_header_never_raises_a_request_above_its_keys_class(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai")
    queue = {"capacity": 1, "max_waiting": 4, "timeout": 60}
    cfg = parse_config(
        {
            "models": [{"name": "m", "targets": [target(server, "openai")], "queue": queue}],
            "teams": [{"id": "team1", "priority": "batch", "keys": [{"id": "k1", "sha256": hash_key(KEY)}]}],
        }
    )
    gw = await gateway(cfg)
    holder = asyncio.create_task(gw.send(BY_NAME["openai"], "m", HOLD, False))
    await eventually(lambda: server.active == 1, "the slot held")
    raised = with_header(BY_NAME["openai"], "X-Gateway-Priority", "interactive")
    waiter = asyncio.create_task(gw.send(raised, "m", "asks for more", False))
    fair = gw.server.app[GATEWAY].fair.queues["m"]
    await eventually(lambda: fair.local.waiting == 1, "the request queued")
    assert fair.local.counts == [0, 1]  # in the key's own class, batch, not the one it asked for
    holder.cancel()
    assert (await waiter).status == 200

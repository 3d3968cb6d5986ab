"""The signals an autoscaler reads, under concurrent requests on real sockets: per model, requests in
flight, requests waiting in admission and the tokens they are estimated to need (gateway_model_*),
and each vLLM replica's own queue and KV-cache use, as scraped (gateway_replica_*)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from prometheus_client import REGISTRY

from adapters.http import HTTPUpstream
from backends.pool.replicas import ReplicaPool
from gateway.core.request import Operation
from gateway.dialects import DIALECTS
from gateway.dialects.openai.egress import VLLM_WIRE
from gateway.limits import plan as planning
from gateway.obs import metrics
from gateway.obs.load import Load, ModelLoad
from gateway.obs.metrics import ReplicaGaugeSet
from gateway.runtime.config import Target, hash_key
from gateway.web.state import GATEWAY
from tests.fakes.upstream import start
from tests.integration.conftest import GatewayFactory, completions_server, config
from tests.integration.dialect_clients import BEARER, KEY

SLOTS = 2  # the team's concurrency limit: requests past it wait in admission
SENT = 5
BODY = {"model": "m", "prompt": "how many pods now?", "max_tokens": 7}
ANSWER = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1,
    "model": "up-model",
    "choices": [{"index": 0, "text": "three", "finish_reason": "stop", "logprobs": None}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


class Held:
    """The upstream: every request waits until ``release``; ``arrived`` is set when ``SLOTS`` have come."""

    def __init__(self) -> None:
        self.count = 0
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.count += 1
        if self.count == SLOTS:
            self.arrived.set()
        await self.release.wait()
        return web.json_response(ANSWER)


class WatchedLoad(Load):
    """The app's per-model levels, with an event for the moment ``waiting`` requests wait in admission."""

    def __init__(self, waiting: int) -> None:
        super().__init__()
        self.queued = asyncio.Event()
        self.waiting = waiting

    def of(self, model: str) -> ModelLoad:
        load = self.models.get(model)
        if load is None:
            load = self.models[model] = WatchedModel(model, self.tallies, self)
        return load


class WatchedModel(ModelLoad):
    __slots__ = ("watch",)

    def __init__(self, model: str, owner: metrics.Tallies, watch: WatchedLoad) -> None:
        super().__init__(model, owner)
        self.watch = watch

    def wait_began(self, tokens: int) -> None:
        super().wait_began(tokens)
        if self.queued.n == self.watch.waiting:
            self.watch.queued.set()


def gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def estimate(body: dict[str, Any]) -> int:
    """What admission reserves for one such request: its prompt's estimate and its most tokens."""
    request = DIALECTS["openai"].parse(Operation.COMPLETION, body, "")
    return planning.estimate_tokens(request, planning.estimate_prompt(request))


async def test_in_flight_queued_and_queued_tokens_per_model(gateway: GatewayFactory) -> None:
    held = Held()
    async with completions_server(held.handle) as upstream:
        teams = [{"id": "team1", "keys": [{"id": "k1", "sha256": hash_key(KEY)}], "limits": {"concurrency": SLOTS}}]
        target = {"provider": "vllm", "base_url": str(upstream.make_url("/v1")), "model": "up-model"}
        gw = await gateway(config([{"name": "m", "targets": [target]}], teams=teams))
        state = gw.server.app[GATEWAY]
        state.load = watched = WatchedLoad(SENT - SLOTS)

        async def ask() -> int:
            async with gw.session.post(gw.url + "/v1/completions", json=BODY, headers=BEARER) as resp:
                await resp.read()
                return resp.status

        asking = [asyncio.create_task(ask()) for _ in range(SENT)]
        await asyncio.wait_for(held.arrived.wait(), 10)  # two hold the slots at the upstream
        await asyncio.wait_for(watched.queued.wait(), 10)  # and the other three wait for one
        load = watched.models["m"]
        assert (load.in_flight.n, load.queued.n, load.queued_tokens.n) == (SENT, SENT - SLOTS, 3 * estimate(BODY))
        metrics.flush(*state.tallies())  # what a scrape would show now
        assert gauge("gateway_model_in_flight_requests", model="m") == SENT
        assert gauge("gateway_model_admission_queue_depth", model="m") == SENT - SLOTS
        assert gauge("gateway_model_queued_tokens", model="m") == 3 * estimate(BODY)

        held.release.set()
        assert await asyncio.gather(*asking) == [200] * SENT
        assert await state.in_flight.drain(10, 0) == 0  # every handler has ended, none was cut
        assert held.count == SENT
        assert (load.in_flight.n, load.queued.n, load.queued_tokens.n) == (0, 0, 0)
        metrics.flush(*state.tallies())
        assert gauge("gateway_model_in_flight_requests", model="m") == 0
        assert gauge("gateway_model_admission_queue_depth", model="m") == 0
        assert gauge("gateway_model_queued_tokens", model="m") == 0


async def test_the_replicas_own_queue_and_kv_cache_use_are_exported() -> None:
    replicas = [await start("vllm", models=("tiny",)) for _ in range(2)]
    try:
        replicas[0].state.waiting, replicas[0].state.kv_usage = 3, 0.42
        replicas[1].state.waiting, replicas[1].state.kv_usage = 0, 0.9
        target = Target(provider="vllm", replicas=tuple(r.url for r in replicas), model="tiny", name="scaled")
        pool = ReplicaPool(target, "m", VLLM_WIRE, HTTPUpstream, ReplicaGaugeSet())
        await pool.start()  # one scrape before it returns
        try:
            for fake, state in zip(replicas, pool.states, strict=True):
                labels = {"target": "scaled", "replica": state.label}
                assert gauge("gateway_replica_engine_waiting", **labels) == fake.state.waiting
                assert gauge("gateway_replica_kv_cache_usage", **labels) == fake.state.kv_usage
        finally:
            await pool.close()
    finally:
        for r in replicas:
            await r.close()

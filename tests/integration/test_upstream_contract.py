"""Every upstream kind against the one contract (``tests/support/upstream_contract.py``): an HTTP target of
each provider and a replica pool of two, both against the one fake upstream on real sockets, and the
mock. The in-process vLLM engine runs the same checks in the vLLM tier
(``tests/vllm/test_vllm_upstream_contract.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import adapters
from adapters.http import HTTPUpstream
from backends.mock import MockEngine
from backends.pool.replicas import ReplicaPool
from gateway.dialects.openai.egress import VLLM_WIRE
from tests.fakes.upstream import Upstream, start
from tests.integration.conftest import config, target
from tests.support.upstream_contract import CHECKS, Kit

FAIL, REJECT = "[[fault:status=500]]", "[[fault:status=400]]"
HTTP_KINDS = ("vllm", "openai", "friendli", "friendli2024", "sgp", "sgp-v4", "octoai", "anthropic")
KINDS = (*(f"http-{k}" for k in HTTP_KINDS), "pool", "mock")


@pytest.fixture(params=KINDS)
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    kind: str = request.param
    fakes: list[Upstream] = []
    if kind == "mock":
        cfg = config([{"name": "m", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 0}}]}])
        tgt = cfg.models[0].targets[0]
        up: HTTPUpstream | ReplicaPool | MockEngine = MockEngine(tgt, "m")
        made = Kit(up, tgt, "m", fail="[mock-error 500]", reject="[mock-error 400]")
    elif kind == "pool":
        fakes = [await start("vllm", models=("up-model",)) for _ in range(2)]
        pool = {"provider": "vllm", "replicas": [f.url for f in fakes], "model": "up-model", "name": "pool"}
        tgt = config([{"name": "m", "targets": [pool]}]).models[0].targets[0]
        up = ReplicaPool(tgt, "m", VLLM_WIRE, HTTPUpstream)
        made = Kit(up, tgt, "m", fail=FAIL, reject=REJECT)
    else:
        wire = kind.removeprefix("http-")
        fakes = [await start(wire, models=("up-model",))]
        tgt = config([{"name": "m", "targets": [target(fakes[0], wire)]}]).models[0].targets[0]
        up = adapters.build(tgt, "m")
        made = Kit(up, tgt, "m", fail=FAIL, reject=REJECT)
    await up.start()
    try:
        yield made
    finally:
        await up.close()
        for f in fakes:
            await f.close()


@pytest.mark.parametrize("check", list(CHECKS))
async def test_every_upstream_kind_keeps_the_contract(kit: Kit, check: str) -> None:
    await CHECKS[check](kit)

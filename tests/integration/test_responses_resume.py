"""A Responses stream relayed as it came from a target's own ``/v1/responses`` that breaks mid-answer:
its response and open item are the upstream's, which the gateway's encoder does not hold, so it
cannot take a continuation. It ends with an ``error`` event, never as if complete (a false ending:
no ``response.completed`` after a cut answer), and no continuation is asked of the next target.
The scorecard (``benchmarks/scorecard.py``) found the false ending in this row for every fault."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.test_responses import post


@pytest.mark.parametrize("fault", ["reset_after=3", "stall_after=3", "error_after=3"])
async def test_a_relayed_stream_that_breaks_ends_in_an_error_event(
    gateway: GatewayFactory, upstream: Any, fault: str
) -> None:
    broken = await upstream("vllm", faults=f"[[fault:{fault}]]")
    healthy = await upstream("vllm")
    idle = {"idle": 0.5}  # the stall is a break once no chunk came for this long
    pair = [target(broken, "vllm", weight=1e6, timeouts=idle), target(healthy, "vllm", timeouts=idle)]
    gw = await gateway(config([{"name": "m", "targets": pair}]))
    status, streamed = await post(gw, {"model": "m", "input": "Say something deterministic", "stream": True})
    assert status == 200, streamed
    types = [e["type"] for e in streamed]
    assert types[0] == "response.created" and types[-1] == "error", types
    assert "response.completed" not in types and "response.incomplete" not in types, types
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))
    assert healthy.requests == []  # nothing asked of it: the client's stream could not have taken it

"""A Responses stream relayed as it came from a target's own ``/v1/responses`` (vLLM's) that breaks
mid-answer: its response and open item are the upstream's, which the gateway's encoder does not hold,
so it cannot take a continuation. It ends with an ``error`` event, never as if complete (a false
ending: ``response.completed`` after a cut answer, which the scorecard, ``benchmarks/scorecard.py``,
found in this row for every fault), and no continuation is asked of the next target. Going out on the
chat path instead, which could continue, would answer a stream otherwise than the same request whole
(vLLM's Responses path renders and samples apart from its chat)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.request import Operation
from gateway.dialects.responses import RESPONSES
from gateway.dialects.responses.render import EventEncoder
from tests.integration.conftest import GatewayFactory, config, target
from tests.integration.test_responses import post

JSON = Any
FAULTS = ["reset_after=3", "stall_after=3", "error_after=3"]
IDLE = {"idle": 0.5}  # a stall is a break once no chunk came for this long


async def pair(gateway: GatewayFactory, upstream: Any, fault: str) -> tuple[Any, Any]:
    broken = await upstream("vllm", faults=f"[[fault:{fault}]]")
    healthy = await upstream("vllm")
    targets = [target(broken, "vllm", weight=1e6, timeouts=IDLE), target(healthy, "vllm", timeouts=IDLE)]
    return await gateway(config([{"name": "m", "targets": targets}])), healthy


async def streamed(gw: Any, **fields: JSON) -> list[JSON]:
    body = {"model": "m", "input": "Say something deterministic", "stream": True, "max_output_tokens": 12}
    status, events = await post(gw, {**body, **fields})
    assert status == 200, events
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_relayed_stream_that_breaks_ends_in_an_error_event(
    gateway: GatewayFactory, upstream: Any, fault: str
) -> None:
    gw, healthy = await pair(gateway, upstream, fault)
    got = await streamed(gw)
    types = [e["type"] for e in got]
    assert types[0] == "response.created" and types[-1] == "error", types
    assert "response.completed" not in types and "response.incomplete" not in types, types
    assert healthy.requests == []  # nothing asked of it: the client's stream could not have taken it


def test_a_relayed_stream_cannot_take_a_continuation() -> None:
    """The guard behind the relay's ``recover`` (``StreamEncoder.continuable``): after the upstream's
    own events the Responses encoder cannot go on, so a break there ends with ``error``."""
    encoder = EventEncoder(RESPONSES.parse(Operation.CHAT, {"model": "m", "input": "x", "stream": True}, ""))
    assert encoder.continuable
    frame = b'data: {"type":"response.created","sequence_number":0,"response":{}}\n\n'
    assert encoder.event(frame) == frame and not encoder.continuable
    assert encoder.end() == b""  # the upstream's own ending is the one the client gets

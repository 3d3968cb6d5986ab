"""A resumed stream joins the client's where the text and the token ids agree, wherever the break
lands: between events, inside a frame, after the first bytes of a character whose text the server
still holds back, inside an event of several tokens, on a reset or on a stall past the idle bound.
For every break point, each dialect's client gets the unbroken run's text, one finish and its usage.

The upstreams are ``tests/support/byte_upstream.py``'s: tokens are bytes, and a continuation fed a
prompt that ends inside a character writes other text, as vLLM's does (issue 40: a real-vLLM resume
that parted from the unbroken run at the break)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.integration.conftest import UPSTREAM_KEY_ENV, GatewayFactory, config
from tests.integration.dialect_clients import STREAMING, Ingress, Reading, read_stream
from tests.support.byte_upstream import ANSWER, ByteUpstream, Cut

DIALECTS = {i.name: i for i in STREAMING if i.name in ("openai", "openai-chat", "sgp5", "friendli2024", "anthropic")}
PROMPT = "hello world"
Started = Callable[[int], Awaitable[ByteUpstream]]


@pytest.fixture
async def byte_upstream() -> AsyncIterator[Started]:
    made: list[ByteUpstream] = []

    async def start(tokens_per_event: int) -> ByteUpstream:
        made.append(await ByteUpstream(tokens_per_event).start())
        return made[-1]

    yield start
    for server in made:
        await server.close()


def pair(broken: ByteUpstream, healthy: ByteUpstream, idle: float) -> Any:
    timeouts = {"connect": 1, "first_byte": 5, "idle": idle, "total": 30}

    def target(server: ByteUpstream, weight: float) -> dict[str, Any]:
        up = {"provider": "vllm", "base_url": server.url, "model": "up", "api_key_env": UPSTREAM_KEY_ENV}
        return up | {"weight": weight, "timeouts": timeouts}

    return config([{"name": "m", "targets": [target(broken, 1e6), target(healthy, 1e-6)]}])


def stop_text(stop: str) -> str:
    return (STOPS[stop] or ["\0"])[0]


async def answer(gateway: GatewayFactory, cfg: Any, ingress: Ingress, **fields: Any) -> Reading:
    gw = await gateway(cfg)
    path, headers, body = ingress.request("m", PROMPT, True, max_tokens=len(ANSWER), temperature=0, **fields)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        return read_stream(ingress, await resp.read())


def break_points(events: list[bytes]) -> list[int]:
    """Offsets into the SSE body: every token event's start, middle and last byte but one (its frame
    whole but for the blank line that ends it), from the second event to the finishing one's start."""
    points, at = [], 0
    for i, event in enumerate(events):
        if i and b'"finish_reason": null' in event:
            points += [at, at + len(event) // 2, at + len(event) - 1]
        at += len(event)
    return points


# stop strings: none; one that never matches, whose length vLLM holds back; one that ends the answer
STOPS = {"no-stop": None, "stop-held": ["zzzz"], "stop-matched": ["A ü"]}


@pytest.mark.parametrize("per_event", [1, 3], ids=["token-events", "merged-events"])
@pytest.mark.parametrize("dialect", list(DIALECTS))
@pytest.mark.parametrize("stop", list(STOPS))
async def test_a_resumed_stream_joins_at_the_break_exactly(
    gateway: GatewayFactory, byte_upstream: Started, dialect: str, per_event: int, stop: str
) -> None:
    ingress, fields = DIALECTS[dialect], {} if STOPS[stop] is None else {"stop": STOPS[stop]}
    if fields and dialect == "anthropic":
        fields = {"stop_sequences": STOPS[stop]}
    broken, healthy = await byte_upstream(per_event), await byte_upstream(1)
    cfg = pair(broken, healthy, idle=5)
    want = await answer(gateway, cfg, ingress, **fields)
    text = ANSWER.decode(errors="replace")
    assert want.complete and want.finishes == 1 and want.text == text.partition(stop_text(stop))[0], want
    points = break_points(broken.events)
    assert len(points) >= 15, points  # every event of the answer but its first and its finish
    for at in points:
        broken.cut, sent = Cut(at), len(healthy.bodies)
        got = await answer(gateway, cfg, ingress, **fields)
        assert broken.cut is None and len(healthy.bodies) == sent + 1, f"no break at {at}"
        assert (got.text, got.finishes, got.complete, got.usage) == (want.text, 1, True, want.usage), at


@pytest.mark.parametrize("dialect", ["openai", "openai-chat"])
async def test_a_stall_inside_a_held_back_character_joins_exactly(
    gateway: GatewayFactory, byte_upstream: Started, dialect: str
) -> None:
    """A SIGSTOPped server's stream: silent and open, half an event read, ended by the idle bound."""
    ingress = DIALECTS[dialect]
    broken, healthy = await byte_upstream(1), await byte_upstream(1)
    cfg = pair(broken, healthy, idle=0.2)
    want = await answer(gateway, cfg, ingress)
    # half the event of the euro sign's second byte read, its first byte's event (no text yet) whole
    second = ANSWER.index("€".encode()) + 1 + (dialect == "openai-chat")  # after the chat's role event
    broken.cut = Cut(sum(map(len, broken.events[:second])) + len(broken.events[second]) // 2, stall=True)
    got = await answer(gateway, cfg, ingress)
    assert len(healthy.bodies) == 1 and isinstance(healthy.bodies[0]["prompt"], list), healthy.bodies  # from ids
    assert (got.text, got.finishes, got.complete, got.usage) == (want.text, 1, True, want.usage)

"""What the real engines say about themselves on /metrics, and a client's hang-up seen from there."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests.vllm.server import VLLM


async def metric(vllm: VLLM, name: str, match: str = "") -> float:
    async with aiohttp.ClientSession() as s, s.get(vllm.base + "/metrics") as resp:
        text = await resp.text()
    pattern = rf"^{re.escape(name)}\{{([^}}]*)\}} ([0-9.e+]+)"
    return sum(float(m.group(2)) for m in re.finditer(pattern, text, re.M) if match in m.group(1))


async def ran_to_end(vllm: VLLM) -> float:
    """Requests the engine finished by a stop or its length limit. Aborts are left out: vLLM counts
    some of them in the same counter (``finished_reason="abort"``), depending on where in a step the
    abort lands."""
    return sum([await metric(vllm, "vllm:request_success_total", f'finished_reason="{r}"') for r in ("stop", "length")])


async def in_engine(vllm: VLLM) -> float:
    return await metric(vllm, "vllm:num_requests_running") + await metric(vllm, "vllm:num_requests_waiting")


async def idle(vllm: VLLM, within: float = 60.0) -> None:
    """Waits until no request runs or waits in the engine (earlier tests' work has settled, or a hang-up
    has freed it), so its counters move only by what comes next."""
    deadline = time.monotonic() + within
    while await in_engine(vllm):
        assert time.monotonic() < deadline, "the engine still has requests"
        await asyncio.sleep(0.05)


@dataclass(frozen=True)
class HangUp:
    left_after: float  # seconds from the hang-up until no engine had the request
    ran_to_end: bool  # an engine counted it finished by its length: the hang-up did not abort it
    generated: float  # tokens the engines generated for it

    def __str__(self) -> str:
        ended = "ran to its end" if self.ran_to_end else "aborted"
        return f"{ended}, out of the engines {self.left_after:.2f} s after the hang-up, {self.generated:.0f} tokens"


async def hang_up(url: str, body: dict[str, Any], headers: dict[str, str], engines: Sequence[VLLM]) -> HangUp:
    """Streams ``body`` through the gateway at ``url``, reads one line and goes away."""
    for vllm in engines:  # earlier work settles first: the counters then move only for this request
        await idle(vllm)
    finished = [await ran_to_end(v) for v in engines]
    generated = [await metric(v, "vllm:generation_tokens_total") for v in engines]
    async with aiohttp.ClientSession() as client:
        resp = await client.post(url, json={**body, "stream": True}, headers=headers)
        assert resp.status == 200, await resp.text()
        await resp.content.readline()  # the engine is generating
        resp.close()
    hung_up = time.monotonic()
    for vllm in engines:
        await idle(vllm, within=30)  # even a request that is never aborted ends (its length) well within this
    left_after = time.monotonic() - hung_up
    await asyncio.sleep(1)  # the counters of a request that ends now have been written
    ran = sum([await ran_to_end(v) for v in engines]) - sum(finished)
    more = sum([await metric(v, "vllm:generation_tokens_total") for v in engines]) - sum(generated)
    return HangUp(left_after, ran > 0, more)


async def assert_hang_ups_abort(
    url: str, body: dict[str, Any], headers: dict[str, str], engines: Sequence[VLLM], tries: int = 3
) -> HangUp:
    """A client's hang-up aborts its request in the engine, short of the ``max_tokens`` in ``body``.

    Up to ``tries`` hang-ups, because vLLM's own disconnect handling now and then lets a request run on
    (in one clean-clone CI run a request ran its 400 tokens, about a second's work here, after its client
    left; run alone, on an idle or a loaded machine, the same hang-up leaves the engine within 0.2-0.5 s).
    A gateway that never closes the upstream connection of a client that left fails every try."""
    tried: list[HangUp] = []
    for _ in range(tries):
        outcome = await hang_up(url, body, headers, engines)
        tried.append(outcome)
        if not outcome.ran_to_end and outcome.generated < body["max_tokens"]:
            return outcome
    raise AssertionError("the engines kept generating for a client that left: " + "; ".join(map(str, tried)))

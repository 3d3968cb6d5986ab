"""What the real engines say about themselves on /metrics, and a client's hang-up seen from there."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests.support import eventually
from tests.vllm.server import MAX_MODEL_LEN, VLLM

HANG_UP_TOKENS = MAX_MODEL_LEN - 192  # an answer the engine cannot finish before a hang-up lands; room for a prompt


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


async def idle(vllm: VLLM, what: str = "earlier requests settled") -> None:
    """Waits until no request runs or waits in the engine (earlier tests' work has settled, or a hang-up
    has freed it), so its counters move only by what comes next."""
    await eventually(lambda: engine_empty(vllm), f"no request in the engine at {vllm.base}: {what}")


async def engine_empty(vllm: VLLM) -> bool:
    return not await in_engine(vllm)


@dataclass(frozen=True)
class HangUp:
    left_after: float  # seconds from the hang-up until no engine had the request
    ran_to_end: bool  # an engine counted it finished by its length: the hang-up did not abort it
    generated: float  # tokens the engines generated for it

    def __str__(self) -> str:
        ended = "ran to its end" if self.ran_to_end else "aborted"
        return f"{ended}, out of the engines {self.left_after:.2f} s after the hang-up, {self.generated:.0f} tokens"


async def hang_up(url: str, body: dict[str, Any], headers: dict[str, str], engines: Sequence[VLLM]) -> HangUp:
    """Streams ``body`` through the gateway at ``url``, reads one line and goes away; returns once no
    engine has the request. The counters are read then: the engine reports a finished request's tokens
    and its end with the same step's stats that show it gone, and an aborted one's last tokens only
    lower the count."""
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
        await idle(vllm, "the request aborted after its client hung up")
    left_after = time.monotonic() - hung_up
    ran = sum([await ran_to_end(v) for v in engines]) - sum(finished)
    more = sum([await metric(v, "vllm:generation_tokens_total") for v in engines]) - sum(generated)
    return HangUp(left_after, ran > 0, more)


async def greedy_text(url: str, body: dict[str, Any], headers: dict[str, str]) -> str:
    """A short greedy completion of ``body``'s prompt through ``url``: what an engine in a sound state
    answers the same every time."""
    probe = {"model": body["model"], "prompt": body["prompt"], "max_tokens": 16, "temperature": 0}
    async with aiohttp.ClientSession() as client, client.post(url, json=probe, headers=headers) as resp:
        out = await resp.json()
    assert resp.status == 200 and "choices" in out, f"a greedy probe after a hang-up: {resp.status} {out}"
    return str(out["choices"][0]["text"])


async def assert_hang_ups_abort(
    url: str, body: dict[str, Any], headers: dict[str, str], engines: Sequence[VLLM]
) -> HangUp:
    """A client's hang-up aborts its request in the engine, short of the ``max_tokens`` in ``body``, and
    leaves the engine answering as before (a greedy probe, before and after, agrees).

    ``body`` asks for ``HANG_UP_TOKENS`` (and ``ignore_eos``): many seconds of the engine's work, where
    the hang-up lands within a fraction of one. (With 480 tokens, about a second's work here, a clean-clone
    CI run on a loaded machine saw the engine finish three tries in a row before the hang-up landed.)
    A gateway that never closes the upstream connection of a client that left lets the engine generate
    every token, and fails. The probe fails here, naming the hang-up, an engine that a long request
    corrupted (once: positions past the model's table, docs/vllm.md), rather than the tests after it."""
    assert body["max_tokens"] >= HANG_UP_TOKENS and body.get("ignore_eos"), body
    before = await greedy_text(url, body, headers)
    outcome = await hang_up(url, body, headers, engines)
    assert not outcome.ran_to_end and outcome.generated < body["max_tokens"], (
        f"the engines kept generating for a client that left: {outcome}"
    )
    after = await greedy_text(url, body, headers)
    assert after == before, f"the engine answers differently after the hang-up ({outcome}): {before!r} -> {after!r}"
    return outcome

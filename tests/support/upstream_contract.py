"""The contract every upstream kind keeps (``gateway.core.upstream.Upstream``), as checks run against a
live instance of each kind: HTTP targets of every provider and the replica pool against the one fake
upstream, the mock, and the in-process vLLM engine (in vLLM's venv: ``python -m
tests.support.upstream_contract engine ARGS``, which the vLLM tier runs).

What every kind promises the core: its identity from its target; whole and streamed answers that agree;
a stream in batches of events that ends with its finish and nothing after a ``Then.END`` batch; a stream closed
early that leaves the upstream serving; an expired deadline refused with ``DeadlineExceeded``; failures
as retryable ``GatewayError``s and rejections as non-retryable ones, both before the first byte of a
stream; and the models it lists.

What does not belong here: any kind's own features (each kind's tests hold those).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.errors import DeadlineExceeded, GatewayError, UpstreamRejected
from gateway.core.request import ChatMessage, Feature, InternalRequest, Operation, Sampling
from gateway.core.response import Accumulator, Batch, Completion, Delta, Finish, Then
from gateway.core.upstream import Call, Upstream


@dataclasses.dataclass
class Kit:
    """A started upstream and what its kind needs to be asked: a prompt it answers, and the prompts that
    make it fail (a 5xx) or reject (a 400) before its first byte, where the kind can be asked to."""

    upstream: Upstream
    target: Any  # its ``runtime.config.Target``
    public_model: str
    prompt: str = "Say something short."
    fail: str | None = None
    reject: str | None = None


def request(kit: Kit, prompt: str | None = None, stream: bool = False) -> InternalRequest:
    messages = (ChatMessage("user", kit.prompt if prompt is None else prompt),)
    sampling = Sampling(max_tokens=8, temperature=0.0)
    return InternalRequest(Operation.CHAT, kit.public_model, messages=messages, sampling=sampling, stream=stream)


async def streamed(kit: Kit, req: InternalRequest, call: Call | None = None) -> list[Batch]:
    return [batch async for batch in kit.upstream.stream(req, call or Call("contract"))]


def folded(batches: list[Batch]) -> Completion:
    return Accumulator().extend(ev for batch in batches for ev in batch.events).completion()


async def identity(kit: Kit) -> None:
    up, target = kit.upstream, kit.target
    model = target.model or kit.public_model
    assert up.name == (target.name or f"{target.provider}:{model}"), up.name
    assert up.provider == target.provider
    assert isinstance(up.features, frozenset) and all(isinstance(f, Feature) for f in up.features)
    assert up.features == up.features  # stable: read twice, the same set


async def whole_and_streamed_agree(kit: Kit) -> None:
    whole = await kit.upstream.complete(request(kit), Call("contract-whole"))
    stream = folded(await streamed(kit, request(kit, stream=True)))
    assert whole.choices and whole.choices[0].text, whole
    assert [(c.index, c.text, c.finish_reason) for c in whole.choices] == [
        (c.index, c.text, c.finish_reason) for c in stream.choices
    ]


async def stream_shape(kit: Kit) -> None:
    batches = await streamed(kit, request(kit, stream=True))
    assert batches and all(isinstance(b, Batch) and b.events for b in batches)
    events = [ev for b in batches for ev in b.events]
    assert any(isinstance(ev, Delta) and ev.text for ev in events), events
    finishes = [i for i, ev in enumerate(events) if isinstance(ev, Finish)]
    assert finishes, events
    assert all(b.then is not Then.END for b in batches[:-1])  # nothing follows an END batch


async def closed_early(kit: Kit) -> None:
    events = kit.upstream.stream(request(kit, stream=True), Call("contract-early"))
    assert await anext(events)
    await events.aclose()  # type: ignore[attr-defined]
    again = await kit.upstream.complete(request(kit), Call("contract-after"))
    assert again.choices and again.choices[0].text


async def expired_deadline(kit: Kit) -> None:
    call = Call("contract-late", deadline=asyncio.get_running_loop().time() - 1)
    for attempt in (kit.upstream.complete(request(kit), call), streamed(kit, request(kit, stream=True), call)):
        try:
            await attempt
        except DeadlineExceeded:
            continue
        raise AssertionError("an expired deadline was served")


async def _raised(kit: Kit, prompt: str) -> tuple[GatewayError, GatewayError]:
    """The errors of a whole and of a streamed call: both before any answer or first batch."""
    found: list[GatewayError] = []
    for stream in (False, True):
        try:
            if stream:
                await anext(kit.upstream.stream(request(kit, prompt, True), Call("contract-bad")))
            else:
                await kit.upstream.complete(request(kit, prompt), Call("contract-bad"))
        except GatewayError as err:
            found.append(err)
            continue
        raise AssertionError(f"{prompt!r} was answered")
    return found[0], found[1]


async def failure_is_retryable(kit: Kit) -> None:
    if kit.fail is None:
        return  # this kind cannot be asked to fail
    for err in await _raised(kit, kit.fail):
        assert err.retryable and not isinstance(err, UpstreamRejected), err


async def rejection_is_final(kit: Kit) -> None:
    if kit.reject is None:
        return
    for err in await _raised(kit, kit.reject):
        assert isinstance(err, UpstreamRejected) and err.status == 400 and not err.retryable, err


async def lists_models(kit: Kit) -> None:
    models = await kit.upstream.list_models()
    assert isinstance(models, list) and all(isinstance(m, str) for m in models)
    assert (kit.target.model or kit.public_model) in models, models


Check = Callable[[Kit], Awaitable[None]]
CHECKS: dict[str, Check] = {
    c.__name__: c
    for c in (
        identity,
        whole_and_streamed_agree,
        stream_shape,
        closed_early,
        expired_deadline,
        failure_is_retryable,
        rejection_is_final,
        lists_models,
    )
}


async def _engine(engine: dict[str, Any]) -> dict[str, str]:
    """Every check against the in-process vLLM engine (run in vLLM's venv): check → "ok" or its error."""
    from backends.vllm_engine import VLLMEngine
    from gateway.runtime.config import Target

    target = Target(provider="vllm-engine", engine=engine)
    upstream = VLLMEngine(target, "tiny")
    await upstream.start()
    results: dict[str, str] = {}
    try:
        for name, check in CHECKS.items():
            try:
                await check(Kit(upstream, target, "tiny"))
                results[name] = "ok"
            except Exception as exc:  # reported by name, so the tier's test shows each
                results[name] = f"{type(exc).__name__}: {exc}"
    finally:
        await upstream.close()
    return results


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "engine":
        sys.exit("usage: python -m tests.support.upstream_contract engine ENGINE_ARGS_JSON")
    print("contract:", json.dumps(asyncio.run(_engine(json.loads(sys.argv[2])))), flush=True)

"""Per-choice seeds for targets that take one seed per call: one upstream call per seed, merged.

Friendli lets a client give one seed per choice (``seed: [s0, s1, ...]``, dialects.md §6.9); a target
that honours a single seed gets ``len(seeds)`` calls with ``n = 1``. Choice ``j`` of prompt ``i`` keeps
OpenAI's index rule, ``i * n + j`` (§6.10), and reports the seed it was made with. Streams are merged as
their events arrive; usage is summed (each call really processed the prompt).

A seed list is at most ``MAX_CHOICES`` long (the dialects refuse longer ones) and at most
``FANOUT_CONCURRENCY`` of its calls are in flight at once, so one request cannot take every connection
to a target from the other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

from gateway.core.caps import FANOUT_CONCURRENCY
from gateway.core.request import Feature, InternalRequest
from gateway.core.response import (
    Batch,
    Completion,
    Delta,
    Finish,
    StreamEvent,
    StreamStart,
    Then,
    Usage,
    UsageReport,
)
from gateway.core.upstream import Call, StreamProgress, Upstream


def needs_fan_out(request: InternalRequest, upstream: Upstream) -> bool:
    return (
        Feature.SEED_PER_CHOICE in request.features
        and Feature.SEED_PER_CHOICE not in upstream.features
        and Feature.SEED in upstream.features
    )


def without_seed_list(request: InternalRequest) -> InternalRequest:
    """The request as ``fit`` should judge it for a fan-out target: one seed, one choice per call."""
    features = request.features - {Feature.SEED_PER_CHOICE, Feature.N}
    return dataclasses.replace(request, features=features)


class FanOut:
    """An ``Upstream`` that serves per-choice seeds through several calls to ``inner``."""

    def __init__(self, inner: Upstream) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def provider(self) -> str:
        return self.inner.provider

    @property
    def features(self) -> frozenset[Feature]:
        return self.inner.features | {Feature.SEED_PER_CHOICE}

    async def start(self) -> None:
        await self.inner.start()

    def _parts(self, request: InternalRequest) -> list[tuple[int, InternalRequest]]:
        seeds = request.sampling.seeds or ()
        # Merged streams are re-indexed event by event, so none of them is relayed as it comes.
        whole = dataclasses.replace(request, relay=None)
        return [
            (j, dataclasses.replace(whole, sampling=dataclasses.replace(request.sampling, n=1, seeds=(seed,))))
            for j, seed in enumerate(seeds)
        ]

    @staticmethod
    def _index(prompt_index: int, j: int, n: int) -> int:
        return prompt_index * n + j

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        parts = self._parts(request)
        n = len(parts)
        gate = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def one(part: InternalRequest) -> Completion:
            async with gate:
                return await self.inner.complete(part, call)

        answers = await asyncio.gather(*(one(part) for _, part in parts))
        choices = []
        prompt = completion = 0
        for (j, part), answer in zip(parts, answers, strict=True):
            for choice in answer.choices:
                choice.index = self._index(choice.index, j, n)
                choice.seed = (part.sampling.seeds or (None,))[0]
                choices.append(choice)
            if answer.usage is not None:
                prompt += answer.usage.prompt_tokens
                completion += answer.usage.completion_tokens
        merged = answers[0]
        merged.choices = sorted(choices, key=lambda c: c.index)
        merged.usage = Usage(prompt, completion)
        return merged

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        parts = self._parts(request)
        n = len(parts)
        queue: asyncio.Queue[tuple[int, Batch | BaseException | None]] = asyncio.Queue()
        gate = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def pump(j: int, part: InternalRequest, own: Call) -> None:
            try:
                async with gate:  # a stream holds its place until it ends
                    async for batch in self.inner.stream(part, own):
                        await queue.put((j, batch))
                await queue.put((j, None))
            except BaseException as exc:  # handed to the consumer, which raises it
                await queue.put((j, exc))
                raise

        # each part's own progress: a part cut short leaves its usage there (``StreamProgress``)
        calls = [dataclasses.replace(call, progress=StreamProgress()) for _ in parts]
        tasks = [asyncio.create_task(pump(j, part, calls[j])) for j, part in parts]
        started, open_parts = False, n
        prompt = completion = 0
        ended: set[int] = set()
        try:
            while open_parts:
                j, item = await queue.get()
                if item is None:
                    open_parts -= 1
                    ended.add(j)
                    continue
                if isinstance(item, BaseException):
                    raise item
                seed = (parts[j][1].sampling.seeds or (None,))[0]
                out: list[StreamEvent] = []
                for ev in item.events:
                    if isinstance(ev, StreamStart):
                        if not started:
                            started = True
                            out.append(ev)
                    elif isinstance(ev, Delta):
                        out.append(dataclasses.replace(ev, index=self._index(ev.index, j, n)))
                    elif isinstance(ev, Finish):
                        out.append(Finish(self._index(ev.index, j, n), ev.reason, seed))
                    elif isinstance(ev, UsageReport):
                        prompt += ev.usage.prompt_tokens
                        completion += ev.usage.completion_tokens
                if out:
                    yield Batch(out)
            yield Batch([UsageReport(Usage(prompt, completion))], Then.END)  # the answer ends in the same send
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            call.progress.usage = _summed(
                prompt, completion, [c.progress.usage for j, c in enumerate(calls) if j not in ended]
            )

    async def list_models(self) -> list[str]:
        return await self.inner.list_models()

    async def close(self) -> None:
        await self.inner.close()


def _summed(prompt: int, completion: int, cut: list[Usage | None]) -> Usage | None:
    """A fanned-out stream's usage as of its end: what its ended parts reported (``prompt``,
    ``completion``) and what each part cut short left as it went, every call having billed the
    prompt; None (the stream's bounds settle it) where a cut part left none, since a sum without it
    would count its prompt as free."""
    if any(u is None for u in cut):
        return None
    return Usage(
        prompt + sum(u.prompt_tokens for u in cut if u is not None),
        completion + sum(u.completion_tokens for u in cut if u is not None),
    )

"""Per-choice seeds for targets that take one seed per call: one upstream call per seed, merged.

Friendli lets a client give one seed per choice (``seed: [s0, s1, ...]``, dialects.md §6.9); a target
that honours a single seed gets ``len(seeds)`` calls with ``n = 1``. Choice ``j`` of prompt ``i`` keeps
OpenAI's index rule, ``i * n + j`` (§6.10), and reports the seed it was made with. Streams are merged as
their events arrive; usage is summed, cache and reasoning counts too (each call really processed the
prompt).

A seed list is at most ``MAX_CHOICES`` long (the dialects refuse longer ones) and at most
``FANOUT_CONCURRENCY`` of its calls are in flight at once, so one request cannot take every connection
to a target from the other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence

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
        """The calls' answers merged. A call that fails starts no more of them, lets those in flight
        end and is raised; either way (a client gone, too) the calls that answered leave their usage
        in ``call.progress`` (settled with the error: each call was billed)."""
        parts = self._parts(request)
        answers: list[Completion | None] = [None] * len(parts)
        try:
            await self._answers(parts, call, answers)
        finally:
            call.progress.usage = _sum([a.usage for a in answers if a is not None])
        return self._merged(parts, [a for a in answers if a is not None])

    async def _answers(
        self, parts: list[tuple[int, InternalRequest]], call: Call, answers: list[Completion | None]
    ) -> None:
        """Fills in ``answers``; the first failure raised once no call is in flight."""
        gate = asyncio.Semaphore(FANOUT_CONCURRENCY)
        failures: list[BaseException] = []

        async def one(j: int, part: InternalRequest) -> None:
            async with gate:
                if failures:  # its answer would be billed and thrown away
                    return
                try:
                    answers[j] = await self.inner.complete(part, call)
                except Exception as exc:
                    failures.append(exc)

        await asyncio.gather(*(one(j, part) for j, part in parts))
        if failures:
            raise failures[0]

    def _merged(self, parts: list[tuple[int, InternalRequest]], answers: list[Completion]) -> Completion:
        n = len(parts)
        choices = []
        for (j, part), answer in zip(parts, answers, strict=True):
            for choice in answer.choices:
                choice.index = self._index(choice.index, j, n)
                choice.seed = _seed(part)
                choices.append(choice)
        merged = answers[0]
        merged.choices = sorted(choices, key=lambda c: c.index)
        merged.usage = _sum([a.usage for a in answers])
        return merged

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        parts = self._parts(request)
        n = len(parts)
        run = _Run(self.inner, [dataclasses.replace(call, progress=StreamProgress()) for _ in parts])
        tasks = [asyncio.create_task(run.pump(j, part)) for j, part in parts]
        started = False
        try:
            while len(run.ended) < n:
                j, item = await run.queue.get()
                if item is None:
                    run.ended.add(j)
                    continue
                if isinstance(item, BaseException):
                    raise item
                out: list[StreamEvent] = []
                for ev in item.events:
                    if isinstance(ev, UsageReport):
                        run.reported.setdefault(j, []).append(ev.usage)
                    elif not isinstance(ev, StreamStart) or not started:
                        started = started or isinstance(ev, StreamStart)
                        out.extend(self._reindexed(ev, parts[j], n))
                if out:
                    yield Batch(out)
            yield Batch(run.report(), Then.END)  # the answer ends in the same send
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            call.progress.usage = run.usage()

    def _reindexed(self, ev: StreamEvent, part: tuple[int, InternalRequest], n: int) -> list[StreamEvent]:
        """Part ``part``'s event as the merged stream sends it: its choice's index in the whole, and a
        finish with the seed it was made with; none of the events the merge does not pass on."""
        j, req = part
        if isinstance(ev, StreamStart):
            return [ev]
        if isinstance(ev, Delta):
            return [dataclasses.replace(ev, index=self._index(ev.index, j, n))]
        if isinstance(ev, Finish):
            return [Finish(self._index(ev.index, j, n), ev.reason, _seed(req))]
        return []

    async def list_models(self) -> list[str]:
        return await self.inner.list_models()

    async def close(self) -> None:
        await self.inner.close()


def _seed(part: InternalRequest) -> int | None:
    """The one seed a part's call is made with."""
    return (part.sampling.seeds or (None,))[0]


class _Run:
    """A fanned-out stream's parts as they run: each part's batches onto one queue (at most
    ``FANOUT_CONCURRENCY`` parts at once), and what each leaves for the merged stream's usage."""

    def __init__(self, inner: Upstream, calls: list[Call]) -> None:
        self.inner = inner
        self.calls = calls  # each part's own: a part cut short leaves its usage there (``StreamProgress``)
        self.queue: asyncio.Queue[tuple[int, Batch | BaseException | None]] = asyncio.Queue()
        self.gate = asyncio.Semaphore(FANOUT_CONCURRENCY)
        self.idle = set(range(len(calls)))  # parts that made no call, or failed before any event: no usage
        self.reported: dict[int, list[Usage]] = {}  # each part's usage events, of the parts that sent one
        self.ended: set[int] = set()  # parts whose stream ended

    async def pump(self, j: int, part: InternalRequest) -> None:
        """Part ``j``'s batches onto the queue, then None; its error instead, for the consumer to raise."""
        batches = 0
        try:
            async with self.gate:  # a stream holds its place until it ends
                self.idle.discard(j)
                async for batch in self.inner.stream(part, self.calls[j]):
                    batches += 1
                    await self.queue.put((j, batch))
            await self.queue.put((j, None))
        except BaseException as exc:
            if isinstance(exc, Exception) and not batches and self.calls[j].progress.usage is None:
                self.idle.add(j)  # refused or failed before its first event: nothing generated
            await self.queue.put((j, exc))
            raise

    def report(self) -> list[StreamEvent]:
        """The merged stream's usage event: none where a call sent none (the stream's bounds settle
        it), since a sum without it would count that call as free."""
        if len(self.reported) < len(self.calls):
            return []
        return [UsageReport(_plus(self._told()))]

    def usage(self) -> Usage | None:
        """The stream's usage as of its end, for settlement: what the parts reported and, of those
        that did not, what each counts for: nothing for one that made no call or failed before its
        first event, what it left as it went for one cut short, None (unknown) for one that ended
        without it."""
        unreported = [
            Usage() if j in self.idle else None if j in self.ended else c.progress.usage
            for j, c in enumerate(self.calls)
            if j not in self.reported
        ]
        return _sum([*self._told(), *unreported])

    def _told(self) -> list[Usage]:
        return [usage for told in self.reported.values() for usage in told]


def _sum(usages: Sequence[Usage | None]) -> Usage | None:
    """The calls' usage summed, every call having billed its prompt: for a fanned-out answer, those
    that answered; for a stream as of its end, what its parts reported and, of those that did not,
    what each counts for (``_Run.usage``). None (the bounds settle it) where one is unknown, since a
    sum without it would count that call as free."""
    known = [u for u in usages if u is not None]
    return _plus(known) if len(known) == len(usages) else None


def _plus(known: Sequence[Usage]) -> Usage:
    return Usage(
        sum(u.prompt_tokens for u in known),
        sum(u.completion_tokens for u in known),
        _total([u.cached_tokens for u in known]),
        _total([u.reasoning_tokens for u in known]),
        _total([u.cache_write_tokens for u in known]),
    )


def _total(counts: list[int | None]) -> int | None:
    """A count some calls may leave out, summed; None where none reported it."""
    known = [c for c in counts if c is not None]
    return sum(known) if known else None

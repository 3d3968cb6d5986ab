"""A per-choice seed list served by one call per seed keeps at most ``FANOUT_CONCURRENCY`` of its
calls in flight, answers and streams alike, and still answers every choice; a whole answer that
fails or is given up leaves the usage of the calls that answered for settlement."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from gateway.core.caps import FANOUT_CONCURRENCY, MAX_CHOICES
from gateway.core.errors import UpstreamFailed
from gateway.core.request import Feature, InternalRequest, Operation, Sampling
from gateway.core.response import (
    Batch,
    Choice,
    Completion,
    Delta,
    Finish,
    StreamEvent,
    StreamStart,
    Usage,
    UsageReport,
)
from gateway.core.upstream import Call
from gateway.routing.fanout import FanOut
from tests.support import turn

SEEDS = tuple(range(MAX_CHOICES))
REQUEST = InternalRequest(
    Operation.COMPLETION,
    "m",
    prompts=("x",),
    sampling=Sampling(n=len(SEEDS), seeds=SEEDS),
    features=frozenset({Feature.SEED, Feature.SEED_PER_CHOICE, Feature.N}),
)


class Held:
    """An upstream whose calls wait until the test lets them go, counting those in flight."""

    name = "held"
    provider = "openai"
    features = frozenset({Feature.SEED})

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.calls = 0
        self.go = asyncio.Event()

    async def _enter(self) -> None:
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await self.go.wait()
        self.in_flight -= 1

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        await self._enter()
        return Completion("c", 0, "m", [Choice(0, text=str(request.sampling.seeds))])

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        await self._enter()
        yield Batch([StreamStart("c", 0, "m"), Delta(0, text="t"), Finish(0, "stop")])

    async def start(self) -> None:
        pass

    async def list_models(self) -> list[str]:
        return []

    async def close(self) -> None:
        pass


async def settle(inner: Held) -> None:
    """Runs the loop until no call is starting any more: every part has either entered the upstream
    or is waiting for its turn (a few passes of the loop, no clock)."""
    seen = -1
    while seen != inner.calls:
        seen = inner.calls
        for _ in range(5):
            await turn()


async def test_a_seed_list_answer_keeps_its_calls_within_the_cap() -> None:
    inner = Held()
    task = asyncio.create_task(FanOut(inner).complete(REQUEST, Call("r")))
    await settle(inner)
    assert inner.in_flight == FANOUT_CONCURRENCY
    inner.go.set()
    answer = await task
    assert inner.calls == len(SEEDS) and inner.peak == FANOUT_CONCURRENCY
    assert [c.seed for c in answer.choices] == list(SEEDS)


async def test_a_seed_list_stream_keeps_its_calls_within_the_cap() -> None:
    inner = Held()
    events: list[StreamEvent] = []

    async def read() -> None:
        async for batch in FanOut(inner).stream(REQUEST, Call("r")):
            events.extend(batch.events)

    task = asyncio.create_task(read())
    await settle(inner)
    assert inner.in_flight == FANOUT_CONCURRENCY
    inner.go.set()
    await task
    assert inner.calls == len(SEEDS) and inner.peak == FANOUT_CONCURRENCY
    assert sorted(e.index for e in events if isinstance(e, Finish)) == list(range(len(SEEDS)))


class Scripted(Held):
    """Calls that answer a usage of 3 + 2 tokens each, but the seeds in ``failing`` (which fail) and
    in ``silent`` (which answer no usage); with ``held`` given, the other seeds' calls wait for ``go``."""

    def __init__(
        self, failing: frozenset[int] = frozenset(), silent: frozenset[int] = frozenset(), held: int | None = None
    ) -> None:
        super().__init__()
        self.failing, self.silent, self.held = failing, silent, held

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        seed = (request.sampling.seeds or (0,))[0]
        self.calls += 1
        if seed in self.failing:
            raise UpstreamFailed("upstream failed")
        if self.held is not None and seed not in SEEDS[: self.held]:
            await self.go.wait()
        usage = None if seed in self.silent else Usage(3, 2)
        return Completion("c", 0, "m", [Choice(0, text="t")], usage)


async def test_a_failed_call_leaves_the_usage_of_the_calls_that_answered() -> None:
    inner, call = Scripted(failing=frozenset({SEEDS[FANOUT_CONCURRENCY - 1]})), Call("r")
    with pytest.raises(UpstreamFailed):
        await FanOut(inner).complete(REQUEST, call)
    # the calls in flight with it answered; none was started after it
    assert inner.calls == FANOUT_CONCURRENCY
    assert call.progress.usage == Usage(3 * (FANOUT_CONCURRENCY - 1), 2 * (FANOUT_CONCURRENCY - 1))


async def test_an_answer_given_up_leaves_the_usage_of_the_calls_that_answered() -> None:
    inner, call = Scripted(held=3), Call("r")
    task = asyncio.create_task(FanOut(inner).complete(REQUEST, call))
    await settle(inner)  # 3 calls answered, the next ones in flight
    assert inner.calls == 3 + FANOUT_CONCURRENCY
    task.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await task
    assert call.progress.usage == Usage(3 * 3, 2 * 3)


async def test_a_call_that_reports_no_usage_is_not_counted_free() -> None:
    answer = await FanOut(Scripted(silent=frozenset({SEEDS[1]}))).complete(REQUEST, Call("r"))
    assert answer.usage is None  # charged the answer's bounds, as any whole answer with no usage


class LateFailure(Scripted):
    """Streams of a usage of 3 + 2 tokens each; the first seed's call fails before its first event
    once ``go`` is set (after the others ended)."""

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        self.calls += 1
        if (request.sampling.seeds or (0,))[0] == SEEDS[0]:
            await self.go.wait()
            raise UpstreamFailed("upstream failed")
        yield Batch([StreamStart("c", 0, "m"), Delta(0, text="t"), Finish(0, "stop"), UsageReport(Usage(3, 2))])


async def test_a_stream_whose_call_failed_before_its_first_event_is_charged_the_others_exactly() -> None:
    inner, call = LateFailure(), Call("r")
    three = dataclasses.replace(REQUEST, sampling=Sampling(n=3, seeds=SEEDS[:3]))
    finishes = 0
    with pytest.raises(UpstreamFailed):
        async for batch in FanOut(inner).stream(three, call):
            finishes += sum(isinstance(e, Finish) for e in batch.events)
            if finishes == 2:
                inner.go.set()
    # the failed call generated nothing: the others' usage, not the stream's bounds (None)
    assert call.progress.usage == Usage(6, 4)


class Unreported(Scripted):
    """Streams of a usage of 3 + 2 tokens each, but the seeds in ``silent``, which send none."""

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        self.calls += 1
        events: list[StreamEvent] = [StreamStart("c", 0, "m"), Delta(0, text="t"), Finish(0, "stop")]
        if (request.sampling.seeds or (0,))[0] not in self.silent:
            events.append(UsageReport(Usage(3, 2)))
        yield Batch(events)


async def test_a_stream_with_a_call_that_sent_no_usage_is_not_counted_free() -> None:
    three = dataclasses.replace(REQUEST, sampling=Sampling(n=3, seeds=SEEDS[:3]))
    call = Call("r")
    events = [
        e async for batch in FanOut(Unreported(silent=frozenset({SEEDS[1]}))).stream(three, call) for e in batch.events
    ]
    assert not [e for e in events if isinstance(e, UsageReport)]  # settled by the stream's bounds
    assert call.progress.usage is None
    assert sorted(e.index for e in events if isinstance(e, Finish)) == [0, 1, 2]


class Cached(Scripted):
    """Calls that each report 3 + 2 tokens, 1 of the prompt's read from a cache, whole or streamed."""

    USAGE = Usage(3, 2, cached_tokens=1)

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        return Completion("c", 0, "m", [Choice(0, text="t")], self.USAGE)

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        yield Batch([StreamStart("c", 0, "m"), Delta(0, text="t"), Finish(0, "stop"), UsageReport(self.USAGE)])


async def test_a_stream_and_a_whole_answer_sum_the_same_usage_cache_counts_too() -> None:
    """The streamed sum once kept prompt and completion alone: a cached prompt was priced in full."""
    three = dataclasses.replace(REQUEST, sampling=Sampling(n=3, seeds=SEEDS[:3]))
    whole, streamed = Call("w"), Call("s")
    answer = await FanOut(Cached()).complete(three, whole)
    events = [e async for batch in FanOut(Cached()).stream(three, streamed) for e in batch.events]
    (report,) = [e for e in events if isinstance(e, UsageReport)]
    assert answer.usage == report.usage == whole.progress.usage == streamed.progress.usage
    assert report.usage == Usage(9, 6, cached_tokens=3)

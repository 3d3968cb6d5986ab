"""A per-choice seed list served by one call per seed keeps at most ``FANOUT_CONCURRENCY`` of its
calls in flight, answers and streams alike, and still answers every choice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gateway.core.caps import FANOUT_CONCURRENCY, MAX_CHOICES
from gateway.core.request import Feature, InternalRequest, Operation, Sampling
from gateway.core.response import Batch, Choice, Completion, Delta, Finish, StreamEvent, StreamStart
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

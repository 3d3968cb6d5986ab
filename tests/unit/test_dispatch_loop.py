"""The one retry-and-fallback loop of ``routing/dispatch.py``: whole answers (``complete``) and streams
(``open_stream``) go through it, so for any script of target outcomes both try the same targets in the
same order, count the same failures and end the same way as the rule says: a failure falls back to the
next target, a rejection (any 4xx but 429) or the last failure is the answer."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import GatewayError, UpstreamFailed, UpstreamRejected, UpstreamTimeout
from gateway.core.request import Feature, InternalRequest, Operation, Sampling
from gateway.core.response import Batch, Choice, Completion, Delta, Finish
from gateway.core.upstream import Call
from gateway.routing import dispatch
from gateway.routing.table import ModelTable, Route

OUTCOMES = ("ok", "failed", "timeout", "busy", "rejected")


def error(outcome: str) -> GatewayError:
    return {
        "failed": UpstreamFailed("reset"),
        "timeout": UpstreamTimeout("slow"),
        "busy": UpstreamRejected("busy", status=429),
        "rejected": UpstreamRejected("bad", status=400),
    }[outcome]


@dataclass
class Scripted:
    """A target that answers or fails as its script says, whole or streamed (before its first byte)."""

    name: str
    outcome: str
    provider: str = "openai"
    features: frozenset[Feature] = frozenset()
    calls: int = 0

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        self.calls += 1
        if self.outcome != "ok":
            raise error(self.outcome)
        return Completion("c", 0, "m", [Choice(0, self.name, "stop")])

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        self.calls += 1
        if self.outcome != "ok":
            raise error(self.outcome)
        yield Batch([Delta(0, text=self.name)])
        yield Batch([Finish(0, "stop")])


def expected(outcomes: list[str]) -> tuple[str | None, list[str]]:
    """The rule, written out: (the target that answers or None, the codes of the failed tries)."""
    failed: list[str] = []
    for i, outcome in enumerate(outcomes):
        if outcome == "ok":
            return f"t{i}", failed
        failed.append(error(outcome).code)
        if outcome == "rejected":
            break
    return None, failed


async def run(outcomes: list[str], streamed: bool) -> tuple[str | None, list[str], dispatch.Attempt, list[int]]:
    targets = [Scripted(f"t{i}", o) for i, o in enumerate(outcomes)]
    # weights that make the weighted pick the configured order, whatever the draw
    weights = [1e9 ** (len(targets) - i) for i in range(len(targets))]
    route = Route("m", list(targets), weights, resume=False)
    table = ModelTable({"m": route})
    request = InternalRequest(Operation.COMPLETION, "m", prompts=("hi",), sampling=Sampling(max_tokens=4))
    attempt = dispatch.Attempt()
    answered: str | None = None
    try:
        if streamed:
            first, rest = await dispatch.open_stream(table, route, request, Call("r"), attempt)
            await rest.aclose()  # type: ignore[attr-defined]
            assert isinstance(first.events[0], Delta)
            answered = first.events[0].text
        else:
            answered = (await dispatch.complete(table, route, request, Call("r"), attempt)).choices[0].text
    except GatewayError as err:
        assert attempt.failed and err.code == attempt.failed[-1][1]
    return answered, [code for _, code in attempt.failed], attempt, [t.calls for t in targets]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=4))
def test_whole_and_streamed_calls_fall_back_by_one_rule(outcomes: list[str]) -> None:
    random.seed(0)
    dispatch.BACKOFF_SECONDS, saved = 0.0, dispatch.BACKOFF_SECONDS
    try:
        whole = asyncio.run(run(outcomes, streamed=False))
        stream = asyncio.run(run(outcomes, streamed=True))
    finally:
        dispatch.BACKOFF_SECONDS = saved
    target, failed = expected(outcomes)
    for answered, codes, attempt, calls in (whole, stream):
        assert (answered, codes) == (target, failed)
        assert attempt.tries == len(failed) + (target is not None)
        assert calls == [1] * attempt.tries + [0] * (len(outcomes) - attempt.tries)
        assert attempt.target == f"t{attempt.tries - 1}"
    assert whole[2].cooled == stream[2].cooled


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_stream_that_ends_at_once_fails_over_like_a_failure(streamed: bool) -> None:
    """A stream closed before its first event is a failed try (``upstream_failed``), as a whole
    answer's reset is."""

    class Empty(Scripted):
        async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
            self.calls += 1
            return
            yield  # pragma: no cover

    first, second = Empty("t0", "failed"), Scripted("t1", "ok")
    route = Route("m", [first, second], [1e9, 1.0], resume=False)
    request = InternalRequest(Operation.COMPLETION, "m", prompts=("hi",))
    attempt = dispatch.Attempt()
    if streamed:
        head, rest = await dispatch.open_stream(ModelTable({"m": route}), route, request, Call("r"), attempt)
        await rest.aclose()  # type: ignore[attr-defined]
        assert isinstance(head.events[0], Delta) and head.events[0].text == "t1"
    else:
        answer = await dispatch.complete(ModelTable({"m": route}), route, request, Call("r"), attempt)
        assert answer.choices[0].text == "t1"
    assert attempt.failed == [("t0", "upstream_failed")] and attempt.tries == 2


ADVISORY = (Feature.EFFORT, Feature.THINKING, Feature.THOUGHTS)  # dropped by a target without them


async def dropped_by(targets: list[Scripted], streamed: bool) -> tuple[str | None, list[Feature]]:
    """Which target answered a request asking for every advisory feature, and the drops counted."""
    route = Route("m", list(targets), [1e9 ** (len(targets) - i) for i in range(len(targets))], resume=False)
    request = InternalRequest(Operation.CHAT, "m", features=frozenset(ADVISORY), sampling=Sampling(max_tokens=4))
    attempt = dispatch.Attempt()
    table = ModelTable({"m": route})
    try:
        if streamed:
            _, rest = await dispatch.open_stream(table, route, request, Call("r"), attempt)
            await rest.aclose()  # type: ignore[attr-defined]
        else:
            await dispatch.complete(table, route, request, Call("r"), attempt)
    except GatewayError:
        return None, attempt.dropped
    return attempt.target, attempt.dropped


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(OUTCOMES), st.frozensets(st.sampled_from(ADVISORY))), min_size=1, max_size=4),
    st.booleans(),
)
def test_the_drops_counted_are_those_of_the_target_that_answered(
    scripts: list[tuple[str, frozenset[Feature]]], streamed: bool
) -> None:
    """Targets of different capabilities tried in turn: the features counted as dropped are what the
    one that answered went without, whichever were tried before or come after it; none when none
    answered (no answer was shaped by a drop; each failed try is in ``failed``)."""
    targets = [Scripted(f"t{i}", outcome, features=features) for i, (outcome, features) in enumerate(scripts)]
    dispatch.BACKOFF_SECONDS, saved = 0.0, dispatch.BACKOFF_SECONDS
    try:
        answered, dropped = asyncio.run(dropped_by(targets, streamed))
    finally:
        dispatch.BACKOFF_SECONDS = saved
    target, _ = expected([outcome for outcome, _ in scripts])
    assert answered == target
    want = [] if target is None else sorted(frozenset(ADVISORY) - targets[int(target[1:])].features)
    assert dropped == want


DROPPABLE = (Feature.MIN_P, Feature.TOP_K, Feature.REPETITION_PENALTY)  # each target's config drops these


@dataclass
class Breaking(Scripted):
    """A vLLM target that sends its name as one token, then breaks or finishes; keeps the requests it got."""

    provider: str = "vllm"
    breaks: bool = True
    got: list[InternalRequest] = field(default_factory=list)
    target: object = field(default_factory=lambda: SimpleNamespace(drop_unsupported=[f.value for f in DROPPABLE]))

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        self.got.append(request)
        yield Batch([Delta(0, text=self.name)])
        if self.breaks:
            raise UpstreamFailed("reset")
        yield Batch([Finish(0, "stop")])


async def resumed_through(targets: list[Breaking]) -> tuple[str, dispatch.Attempt]:
    route = Route("m", list(targets), [1e9 ** (len(targets) - i) for i in range(len(targets))], resume=True)
    sampling = Sampling(max_tokens=8, min_p=0.1, top_k=5, repetition_penalty=1.1)
    request = InternalRequest(
        Operation.COMPLETION, "m", prompts=("hi",), sampling=sampling, features=frozenset(DROPPABLE)
    )
    attempt = dispatch.Attempt()
    first, rest = await dispatch.open_stream(ModelTable({"m": route}), route, request, Call("r"), attempt)
    text = "".join(
        ev.text for batch in [first, *[b async for b in rest]] for ev in batch.events if isinstance(ev, Delta)
    )
    return text, attempt


@settings(max_examples=40, deadline=None)
@given(st.lists(st.frozensets(st.sampled_from(DROPPABLE)), min_size=2, max_size=2))
def test_a_continuation_goes_with_the_request_fitted_to_its_own_target(kinds: list[frozenset[Feature]]) -> None:
    """The first target breaks after one token and the second continues: each got the request as it
    takes it (what it drops, dropped), and the drops are counted for each part's own target."""
    targets = [Breaking(f"t{i}", "ok", features=f, breaks=i < len(kinds) - 1) for i, f in enumerate(kinds)]
    text, attempt = asyncio.run(resumed_through(targets))
    assert text == "".join(t.name for t in targets) and len(attempt.resumed) == len(targets) - 1
    for t in targets:
        (got,) = t.got
        assert got.features & frozenset(DROPPABLE) <= t.features
        assert (got.sampling.min_p is None) is (Feature.MIN_P not in t.features)
    first, second = (sorted(frozenset(DROPPABLE) - t.features) for t in targets)
    assert attempt.dropped == first and [sorted(r.dropped) for r in attempt.resumed] == [second]

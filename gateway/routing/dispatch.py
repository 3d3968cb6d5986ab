"""Calling targets: feature fit, then retries and fallbacks *before the first byte* only.

A target that cannot honour the request is skipped in favour of one that can; if none can, the first
refusal (naming the field and target) is the answer. An upstream that *failed* (connect error, 5xx,
429, timeout) is recorded against its health and the next target is tried; an upstream that
*rejected* the request (4xx) ends the attempt, because another target would reject it too. Once a
stream has produced its first event, the client owns it: errors after that go out in-band.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from gateway.core.errors import GatewayError, UnsupportedFeature, UpstreamFailed, UpstreamRejected
from gateway.core.records import replaced
from gateway.core.request import Feature, InternalRequest
from gateway.core.response import Batch, Completion, Finish
from gateway.core.upstream import Call, Upstream
from gateway.obs.tracing import RequestTrace
from gateway.routing import first_token, resume
from gateway.routing.capabilities import fit
from gateway.routing.fanout import FanOut, needs_fan_out, without_seed_list
from gateway.routing.table import ModelTable, Route
from gateway.runtime.throttle import LogThrottle

log = logging.getLogger("gateway.dispatch")
throttled = LogThrottle(log)  # lines a request can cause: one a period per kind
BACKOFF_SECONDS = 0.05


@dataclass(slots=True)
class Attempt:
    """What dispatch learned, for logs and metrics."""

    target: str | None = None
    provider: str | None = None
    tries: int = 0
    dropped: list[Feature] = field(default_factory=list)  # by the target that answered; none if none did
    upstream_seconds: float = 0.0  # waiting on upstreams: whole answers, or up to a stream's first event
    cooled: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (target, error code) of each failed try
    trace: RequestTrace | None = None  # the request's spans, when tracing is on: a span per try
    resumed: list[resume.Resumed] = field(default_factory=list)  # continuations after a mid-stream break


def loggable(err: GatewayError) -> str:
    """What a log line may say of a failed try: our own words; of an upstream's rejection only its
    status, as its message may quote the request back."""
    return f"HTTP {err.status}" if isinstance(err, UpstreamRejected) else err.message


def _for(request: InternalRequest, upstream: Upstream) -> InternalRequest:
    """The request as ``upstream`` gets it: a seed the gateway drew (for a dialect that reports the
    seed used) only goes to a target that takes seeds, so a reported seed is one really used."""
    if not request.seed_drawn or Feature.SEED in upstream.features:
        return request
    return replace(request, sampling=replace(request.sampling, seeds=None), seed_drawn=False)


Candidates = list[tuple[Upstream, InternalRequest]]


def _candidates(table: ModelTable, route: Route, request: InternalRequest) -> tuple[Candidates, list[list[Feature]]]:
    """The targets to try in order, each with the request as it gets it, and beside them the features
    each drops: only the one that answers has its drops counted (``Attempt.dropped``)."""
    order = table.order(route)
    if len(order) == 1 and request.features <= order[0].features:
        return [(order[0], _for(request, order[0]))], [[]]  # one target that serves it all: nothing to fit
    fitted: Candidates = []
    drops: list[list[Feature]] = []
    refusal: UnsupportedFeature | None = None
    for upstream in order:
        droppable = getattr(getattr(upstream, "target", None), "drop_unsupported", ())
        judged = request
        if needs_fan_out(request, upstream):
            judged, upstream = without_seed_list(request), FanOut(upstream)
        try:
            req, dropped = fit(judged, upstream.name, upstream.features, droppable)
        except UnsupportedFeature as exc:
            refusal = refusal or exc
            continue
        fitted.append((upstream, _for(req, upstream)))
        drops.append(dropped)
    if not fitted:
        assert refusal is not None
        raise refusal
    return fitted, drops


def _give_up(err: GatewayError, remaining: int, call: Call) -> bool:
    if not err.retryable or (isinstance(err, UpstreamRejected) and err.status != 429):
        return True
    left = call.remaining()
    return remaining == 0 or (left is not None and left <= BACKOFF_SECONDS)


T = TypeVar("T")
Try = Callable[[int, Upstream, InternalRequest], Awaitable[T]]  # (try number, target, its request) → result


def _failed(table: ModelTable, attempt: Attempt, upstream: Upstream, err: GatewayError) -> None:
    """A failed try, counted: in the attempt, on its span, and against the target's health."""
    attempt.failed.append((upstream.name, err.code))
    if attempt.trace is not None:
        attempt.trace.call_failed(err)
    if not isinstance(err, UpstreamRejected) and err.retryable and table.failed(upstream, err):
        attempt.cooled.append(upstream.name)


async def _first_to_answer(
    table: ModelTable, candidates: Candidates, call: Call, attempt: Attempt, one: Try[T], when: str = ""
) -> tuple[int, T]:
    """The one retry-and-fallback loop: ``one`` on each candidate in turn until one answers; a failure
    falls back to the next candidate after a short backoff, a rejection or the last failure is raised.
    ``when`` says in the log line when a failure counts (a stream's: before its first byte)."""
    for i, (upstream, req) in enumerate(candidates):
        began = time.perf_counter()
        try:
            result = await one(i + 1, upstream, req)
        except GatewayError as err:
            attempt.upstream_seconds += time.perf_counter() - began
            _failed(table, attempt, upstream, err)
            if _give_up(err, len(candidates) - i - 1, call):
                raise err from None
            throttled.warning(
                f"fallback:{upstream.name}",
                "target %s failed%s (%s: %s); falling back",
                upstream.name,
                when,
                err.code,
                loggable(err),
            )
            await asyncio.sleep(BACKOFF_SECONDS * (i + 1))
            continue
        attempt.upstream_seconds += time.perf_counter() - began
        table.succeeded(upstream)
        return i, result
    raise AssertionError("unreachable")  # pragma: no cover


async def complete(
    table: ModelTable, route: Route, request: InternalRequest, call: Call, attempt: Attempt
) -> Completion:
    """The whole answer of the first target that gives one."""

    async def whole(n: int, upstream: Upstream, req: InternalRequest) -> Completion:
        attempt.target, attempt.provider, attempt.tries = upstream.name, upstream.provider, n
        trace = attempt.trace
        completion = await upstream.complete(req, call if trace is None else trace.calling(upstream, n, call))
        if trace is not None:
            trace.ended()
        return _with_seeds(completion, req, upstream)

    candidates, drops = _candidates(table, route, request)
    i, completion = await _first_to_answer(table, candidates, call, attempt, whole)
    attempt.dropped = drops[i]
    return completion


def _seed_of(index: int, req: InternalRequest, upstream: Upstream) -> int:
    """The seed choice ``index`` (prompt i's choice j: i * n + j) was sampled with: its own of a seed
    list; of one seed, ``seed + j`` on a target that derives its children's seeds so."""
    seeds = req.sampling.seeds or (0,)
    if len(seeds) == 1 and Feature.CHILD_SEEDS in upstream.features:
        return seeds[0] + index % req.sampling.n
    return seeds[index % len(seeds)]


def _with_seeds(completion: Completion, req: InternalRequest, upstream: Upstream) -> Completion:
    if req.want_seed and req.sampling.seeds:
        for choice in completion.choices:
            if choice.seed is None:
                choice.seed = _seed_of(choice.index, req, upstream)
    return completion


Batches = AsyncIterator[Batch]


async def _seed_finishes(batches: Batches, req: InternalRequest, upstream: Upstream) -> Batches:
    seeds = req.sampling.seeds
    try:
        async for batch in batches:
            if seeds:
                batch.events = [
                    Finish(ev.index, ev.reason, _seed_of(ev.index, req, upstream))
                    if isinstance(ev, Finish) and ev.seed is None
                    else ev
                    for ev in batch.events
                ]
            yield batch
    finally:
        await batches.aclose()  # type: ignore[attr-defined]


def _opener(attempt: Attempt, call: Call) -> resume.Opener:
    """Opens try ``n`` of a stream on a target: its span, and the seeds its finishes report."""

    def open_on(upstream: Upstream, req: InternalRequest, n: int) -> Batches:
        attempt.target, attempt.provider, attempt.tries = upstream.name, upstream.provider, n
        trace = attempt.trace
        events = upstream.stream(req, call if trace is None else trace.calling(upstream, n, call))
        return _seed_finishes(events, req, upstream) if req.want_seed else events

    return open_on


async def _first(events: Batches, upstream: Upstream, call: Call) -> Batch:
    """The stream's first batch, held until its first token (``first_token``)."""
    return await first_token.first_token(events, first_token.bound(upstream, call), upstream.name)


def _may_resume(
    route: Route, request: InternalRequest, call: Call, candidates: list[tuple[Upstream, InternalRequest]]
) -> bool:
    """The client's switch over the model's; then whether the request and a target can continue."""
    setting = route.resume if call.resume is None else call.resume
    return route.max_resumes > 0 and resume.applies(setting, request, [u for u, _ in candidates])


def _resumable(
    table: ModelTable,
    route: Route,
    candidates: list[tuple[Upstream, InternalRequest]],
    drops: list[list[Feature]],
    i: int,
    call: Call,
    attempt: Attempt,
    opened: tuple[Batch, Batches],
) -> tuple[Batch, Batches]:
    """The stream of candidate ``i``, able to continue elsewhere after a break (``may_resume``), each
    target with its own request and drops."""
    fitted = [(u, r, d) for (u, r), d in zip(candidates, drops, strict=True)]
    targets = fitted[i:] + fitted[:i]

    def failed(target: Upstream, err: GatewayError) -> None:
        attempt.failed.append((target.name, err.code))
        if attempt.trace is not None:
            attempt.trace.call_failed(err)
        if not getattr(target, "members", None) and err.retryable and table.failed(target, err):
            attempt.cooled.append(target.name)

    opener = _opener(attempt, call)
    resumer = resume.Resumer(targets, opener, call, route.max_resumes, attempt.resumed, failed)
    resumer.tries = i + 1
    first, events = opened
    return first, resume.resumable(targets[0][0], first, events, resumer)


async def open_stream(
    table: ModelTable, route: Route, request: InternalRequest, call: Call, attempt: Attempt
) -> tuple[Batch, Batches]:
    """The first batch of events and the rest of the stream, from the first target that produces one."""
    candidates, drops = _candidates(table, route, request)
    may = _may_resume(route, request, call, candidates)
    if may:  # the targets that can continue are asked for what makes a continuation exact
        candidates = [(u, replaced(r, resumable=True) if resume.can_continue(u) else r) for u, r in candidates]
    open_on = _opener(attempt, call)

    async def opened(n: int, upstream: Upstream, req: InternalRequest) -> tuple[Batch, Batches]:
        events = open_on(upstream, req, n)
        try:
            return await _first(events, upstream, call), events
        except (GatewayError, StopAsyncIteration) as exc:
            await events.aclose()  # type: ignore[attr-defined]
            if isinstance(exc, GatewayError):
                raise
            raise UpstreamFailed("upstream closed the stream at once") from None

    i, stream = await _first_to_answer(table, candidates, call, attempt, opened, " before the first byte")
    attempt.dropped = drops[i]  # a continuation's target's own: ``Resumed.dropped``
    return _resumable(table, route, candidates, drops, i, call, attempt, stream) if may else stream

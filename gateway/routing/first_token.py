"""A stream's first batch held until its first token: what comes before it (the stream's identity, a
role, Anthropic's ``message_start`` and pings, a Responses ``response.created``) carries nothing of
the answer, so a stream that breaks there fails before anything reaches the client, and dispatch
tries the next target. The first-token deadline (``ttft``) bounds that wait: a stream whose head came
but whose first token does not come within the target's ``timeouts.ttft`` (cut to the team's
ceiling) fails the same way. Counted apart from the connect, first-byte and idle bounds: its error is
a ``FirstTokenTimeout`` (code ``first_token_timeout``).

What does not belong here: the choice of the next target (``dispatch``), mid-stream breaks (``resume``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gateway.core.errors import FirstTokenTimeout
from gateway.core.response import Batch, Delta, Frame, StreamEvent, StreamStart, Then, UsageReport
from gateway.core.upstream import Call, Upstream


def bound(upstream: Upstream, call: Call) -> float | None:
    """The target's first-token deadline, cut to the team's ceiling; None: none applies."""
    timeouts = getattr(getattr(upstream, "target", None), "timeouts", None)
    own: float | None = getattr(timeouts, "ttft", None)
    if own is None or call.ttft is None:
        return own if own is not None else call.ttft
    return min(own, call.ttft)


# Relayed events (a client's own dialect, passed through) that open a stream or keep it alive
OPENING = (
    b"event: message_start\n",
    b"event: ping\n",
    b"event: response.created\n",
    b"event: response.in_progress\n",
    b"event: response.queued\n",
)


def has_token(batch: Batch) -> bool:
    """The batch carries part of the answer (a token, a relayed chunk) or its end: not only the
    stream's identity, a role, usage, or a relayed event that opens the stream (``OPENING``)."""
    for ev in batch.events:
        if isinstance(ev, Delta):
            if ev.text or ev.token_ids or ev.tool_calls or ev.reasoning or ev.logprobs:
                return True
        elif isinstance(ev, Frame):
            if ev.chunks > 1 or not ev.startswith(OPENING):
                return True  # relayed chunks (several: not scanned, counted as the answer's)
        elif not isinstance(ev, StreamStart | UsageReport):
            return True  # a finish, or a relayed chunk
    return False


async def first_token(events: AsyncIterator[Batch], seconds: float | None, target: str) -> Batch:
    """The stream's events up to and with its first token, as one batch; ``FirstTokenTimeout`` when
    it takes longer than ``seconds`` from now (None: no bound but the stream's own)."""
    if seconds is None:
        return await until_token(events)
    try:
        async with asyncio.timeout(seconds):
            return await until_token(events)
    except TimeoutError:
        raise FirstTokenTimeout(f"target '{target}': no first token within {seconds:g} s") from None


async def until_token(events: AsyncIterator[Batch]) -> Batch:
    """The first batch as it came where it holds a token (most streams' first read: its ``then``
    kept); else the batches up to and with the first token, or the stream's end, as one."""
    batch = await anext(events)
    if batch.then is Then.END or has_token(batch):
        return batch
    held: list[StreamEvent] = list(batch.events)
    while True:
        batch = await anext(events)
        held += batch.events
        if batch.then is Then.END:
            return Batch(held, Then.END)
        if has_token(batch):
            return Batch(held)

"""The first-token deadline (``ttft``): a stream whose head came but whose first token does not come
within the target's ``timeouts.ttft`` (cut to the team's ceiling) fails before anything reaches the
client, so dispatch tries the next target. Counted apart from the connect, first-byte and idle bounds:
its error is a ``FirstTokenTimeout`` (code ``first_token_timeout``).

What does not belong here: the choice of the next target (``dispatch``), mid-stream breaks (``resume``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gateway.core.errors import FirstTokenTimeout
from gateway.core.response import Batch, Delta, StreamEvent, StreamStart, Then, UsageReport
from gateway.core.upstream import Call, Upstream


def bound(upstream: Upstream, call: Call) -> float | None:
    """The target's first-token deadline, cut to the team's ceiling; None: none applies."""
    timeouts = getattr(getattr(upstream, "target", None), "timeouts", None)
    own: float | None = getattr(timeouts, "ttft", None)
    if own is None or call.ttft is None:
        return own if own is not None else call.ttft
    return min(own, call.ttft)


def has_token(batch: Batch) -> bool:
    """The batch carries part of the answer (a token, a relayed chunk) or its end: not only the
    stream's identity, a role, or usage."""
    for ev in batch.events:
        if isinstance(ev, Delta):
            if ev.text or ev.token_ids or ev.tool_calls or ev.reasoning or ev.logprobs:
                return True
        elif not isinstance(ev, StreamStart | UsageReport):
            return True  # a finish, or a relayed chunk (only content chunks are relayed)
    return False


async def first_token(events: AsyncIterator[Batch], seconds: float, target: str) -> Batch:
    """The stream's events up to and with its first token, as one batch; ``FirstTokenTimeout`` when
    it takes longer than ``seconds`` from now."""
    held: list[StreamEvent] = []
    try:
        async with asyncio.timeout(seconds):
            while True:
                batch = await anext(events)
                held += batch.events
                if batch.then is Then.END:
                    return Batch(held, Then.END)
                if has_token(batch):
                    return Batch(held)
    except TimeoutError:
        raise FirstTokenTimeout(f"target '{target}': no first token within {seconds:g} s") from None

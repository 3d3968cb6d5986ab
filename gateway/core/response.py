"""The internal answer: a whole completion, or a stream of events that add up to one.

Upstream adapters decode into these; ingress dialects render from them. Streaming and non-streaming
answers share the same pieces so that ``accumulate(events)`` equals the non-streaming ``Completion``.

The finish-reason vocabulary is ours: ``stop``, ``length``, ``content_filter``, ``tool_calls`` and
``abort``; each dialect maps it onto its own (dialects.md §6.12).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from gateway.core.records import record

FinishReason = Literal["stop", "length", "content_filter", "tool_calls", "abort"]
FINISH_REASONS: frozenset[str] = frozenset(("stop", "length", "content_filter", "tool_calls", "abort"))


@record
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    bytes: tuple[int, ...] | None = None


@record
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None  # of the prompt tokens, read from a prefix (prompt) cache
    reasoning_tokens: int | None = None
    cache_write_tokens: int | None = None  # prompt tokens written to a prompt cache (Anthropic's)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class Choice:
    index: int
    text: str = ""
    finish_reason: FinishReason | None = None
    token_ids: list[int] | None = None
    logprobs: list[TokenLogprob] | None = None
    seed: int | None = None
    role: str | None = None  # chat
    tool_calls: list[Any] | None = None  # chat; OpenAI's shape, kept as JSON
    reasoning: str | None = None  # chat
    stop_sequence: str | None = None  # the stop string that ended it, when the upstream says which


@dataclass(slots=True)
class Completion:
    id: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    embeddings: list[list[float]] | None = None  # an embeddings answer: one vector per input, in order
    # The upstream's answer as it came, for a client of the same API (a Responses object from an
    # upstream's own /v1/responses): rendered as it is, the fields above read from it for accounting.
    raw: Any = None


# --- stream events -----------------------------------------------------------------------------


@record
class StreamStart:
    """First event of every stream: the identity every chunk repeats."""

    id: str
    created: int
    model: str
    system_fingerprint: str | None = None
    # The upstream's chunks may carry vLLM's ``token_ids`` (it was asked for them): when not, a relayed
    # frame is not searched for them.
    token_ids: bool = True


@record
class Delta:
    index: int
    text: str = ""
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    role: str | None = None
    tool_calls: tuple[Any, ...] = ()
    reasoning: str | None = None


@record
class Finish:
    index: int
    reason: FinishReason
    seed: int | None = None
    stop_sequence: str | None = None  # the stop string that ended it, when the upstream says which


@record
class UsageReport:
    usage: Usage


# A relayed event around its text: (head, tail), the event being head + text + tail; or, where the
# upstream writes each token's ids after its text (vLLM asked for them), (head, mid, tail), the event
# being head + text + mid + ids + tail, the ids digits and commas.
Shape = tuple[bytes, bytes] | tuple[bytes, bytes, bytes]


class Frame(bytes):
    """Upstream chunks already in the client's own stream format (``InternalRequest.relay``), framed
    and written as they came: a same-format stream skips decoding and re-encoding. One frame holds one
    or more whole one-line SSE events, one chunk each: ``chunks`` (counted once, where the frame is
    cut; counting again costs a scan of the frame). Finishes, usage and errors never come as frames,
    so what is accounted for still arrives as events.

    A frame of one event may carry its ``shape``: the bytes before and after its text, which holds no
    quote, backslash or newline (``Shape``). The stream's next events with that shape around such a
    text come as ``Token``s, not frames: one chunk each, the read as it came, for the client's encoder
    to treat as it treated the frame that carried the shape."""

    chunks: int = 1
    shape: Shape | None = None

    @classmethod
    def of(cls, data: bytes, chunks: int) -> Frame:
        frame = cls(data)
        frame.chunks = chunks
        return frame


@dataclass(slots=True)
class Token:
    """One relayed event of the shape the stream's last shaped ``Frame`` carried, the upstream's read
    as it came (``data``, one whole one-line SSE event): not copied into a frame, since a model server
    writes one event per token. The client's encoder treats it as it treated the frame that carried
    the shape."""

    data: bytes


StreamEvent = StreamStart | Delta | Finish | UsageReport | Frame | Token


class Then(Enum):
    """What an upstream knows, at a batch, of what follows it (a relay concern: ``gateway/web/relay.py``
    may save a send with it; every other reader of a stream may ignore it)."""

    MORE = "more"  # more may follow, after a wait on the upstream; or nothing (learnt when it stops)
    REST = "rest"  # the first events of a read that was cut after them: the rest follows at once
    END = "end"  # the stream's last batch: its end was seen in the same read, nothing follows


@dataclass(slots=True)
class Batch:
    """The events of one network read (or one engine step), in order, and what follows them. The
    unit a stream is made of: an upstream yields batches, routing passes them on, the relay writes
    each in one send."""

    events: list[StreamEvent]
    then: Then = Then.MORE


@dataclass(slots=True)
class Accumulator:
    """Folds stream events into a ``Completion``: used to answer dialects whose final event repeats
    the whole answer (Friendli 2024's ``complete``), to settle usage, and in tests."""

    start: StreamStart | None = None
    choices: dict[int, Choice] = field(default_factory=dict)
    usage: Usage | None = None

    def add(self, event: StreamEvent) -> None:
        if isinstance(event, Delta):
            choice = self.choices.get(event.index)
            if choice is None:
                choice = self.choices[event.index] = Choice(index=event.index)
            choice.text += event.text
            if event.token_ids:
                choice.token_ids = (choice.token_ids or []) + list(event.token_ids)
            if event.logprobs:
                choice.logprobs = (choice.logprobs or []) + list(event.logprobs)
            if event.role:
                choice.role = event.role
            if event.tool_calls:
                choice.tool_calls = (choice.tool_calls or []) + list(event.tool_calls)
            if event.reasoning:
                choice.reasoning = (choice.reasoning or "") + event.reasoning
        elif isinstance(event, Finish):
            choice = self.choices.setdefault(event.index, Choice(index=event.index))
            choice.finish_reason = event.reason
            if event.seed is not None:
                choice.seed = event.seed
            if event.stop_sequence is not None:
                choice.stop_sequence = event.stop_sequence
        elif isinstance(event, UsageReport):
            self.usage = event.usage
        elif isinstance(event, StreamStart):
            self.start = event
        else:
            # A frame's content is opaque here: relays are asked for only by dialects that write
            # frames out, never by those that fold a stream into a whole answer.
            raise TypeError("a relayed frame cannot be accumulated")

    def extend(self, events: Iterable[StreamEvent]) -> Accumulator:
        for event in events:
            self.add(event)
        return self

    def completion(self) -> Completion:
        start = self.start or StreamStart(id="", created=0, model="")
        choices = [self.choices[i] for i in sorted(self.choices)]
        return Completion(
            id=start.id,
            created=start.created,
            model=start.model,
            choices=choices,
            usage=self.usage,
            system_fingerprint=start.system_fingerprint,
        )


def completion_events(completion: Completion) -> list[StreamEvent]:
    """A whole completion as the stream that would have produced it (fan-out merging, fallbacks)."""
    events: list[StreamEvent] = [
        StreamStart(completion.id, completion.created, completion.model, completion.system_fingerprint)
    ]
    for c in completion.choices:
        events.append(
            Delta(
                index=c.index,
                text=c.text,
                token_ids=tuple(c.token_ids or ()),
                logprobs=tuple(c.logprobs or ()),
                role=c.role,
                tool_calls=tuple(c.tool_calls or ()),
                reasoning=c.reasoning,
            )
        )
        events.append(Finish(c.index, c.finish_reason or "stop", c.seed, c.stop_sequence))
    if completion.usage is not None:
        events.append(UsageReport(completion.usage))
    return events

"""Mid-stream resume: a streamed answer that breaks after its first byte (a reset, an error event, a
stall past the idle bound) continues on the next target or replica that can continue it, from exactly
where it stopped, and the client sees one stream: no token repeated or lost, one finish, usage summed.

How an answer is continued (vLLM's OpenAI server, ``CONTINUERS``):

* from token ids where the stream carried the output's (a stream that may resume asks vLLM for them):
  the prompt's ids (the request's own, or the target's ``/tokenize``, a chat's through its template)
  and the output's, as a completion whose events continue the client's stream, so the continuation
  is the unbroken run's token for token;
* else from text: a completion's prompt plus the text sent; a chat's messages plus the partial
  assistant message, with ``continue_final_message: true`` and ``add_generation_prompt: false`` (also
  a chat that names no ``max_tokens``, whose length a completion would cut to vLLM's default); on
  Anthropic's API, the partial message as its prefill.

``max_tokens`` and ``min_tokens`` shrink by the tokens sent; sampling and seeds are carried. The
continuation's own usage counts the sent tokens as prompt: they are moved back to the completion, so
every completion token counts once and the prompt is billed once. What cannot be continued faithfully
(several choices, echo, a suffix, beams, structured outputs, tools or reasoning, a target that cannot
continue, such as OpenAI's API) keeps the break: the client gets the in-band error, never a finish.

The seam: ``dispatch.open_stream`` hands a stream that may resume to ``resumable``, with a ``Resumer``
that opens a continuation on a given target: a ``Resumable``, which the relay reads without a layer
of its own (it keeps each batch written, and hands a break to ``recover``). Streams that may not
resume are not wrapped at all. What a stream keeps is bounded (``KEEP_BATCHES``, ``KEPT_BYTES``).

What does not belong here: the choice of targets before the first byte (``dispatch``), the HTTP of a
target (``adapters``), any wire format (a relayed chunk is read back by its target's ``replay``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from gateway.core.errors import GatewayError, UpstreamFailed, UpstreamRejected
from gateway.core.request import ChatMessage, Feature, InternalRequest, Operation, Sampling
from gateway.core.response import Batch, Delta, Finish, Frame, StreamEvent, StreamStart, Token, Usage, UsageReport
from gateway.core.upstream import Call, StreamProgress, Upstream
from gateway.runtime.throttle import LogThrottle

log = logging.getLogger("gateway.resume")
throttled = LogThrottle(log)  # lines a request can cause: one a period per kind
Batches = AsyncIterator[Batch]
HEADER = "X-Gateway-Resume"  # per request: "on" or "off", over the model's setting
# How each provider's servers continue an answer: vLLM's OpenAI-compatible server takes a completion's
# prompt as token ids and a chat's ``continue_final_message`` (shared/reference/vllm.md §3); Anthropic's
# Messages API continues a final assistant turn, its prefill (chat only).
CONTINUERS = {"vllm": "vllm", "anthropic": "prefill"}
# What a continuation cannot carry faithfully: a structured output or a tool call restarts its grammar,
# an echo or suffix would repeat, beams and several choices are not one sequence.
NOT_CONTINUABLE = frozenset(
    {
        Feature.JSON_OBJECT,
        Feature.JSON_SCHEMA,
        Feature.REGEX,
        Feature.CHOICE,
        Feature.GRAMMAR,
        Feature.TOOLS,
        Feature.REASONING,
        Feature.THINKING,  # (and effort) a continuation carries the partial text, not a thought cut mid-way
        Feature.EFFORT,
        Feature.PREFILL,  # a continuation's partial message would follow the client's, not extend it
        Feature.ECHO,
        Feature.SUFFIX,
        Feature.BEAM_SEARCH,
        Feature.BEST_OF,
        Feature.N,
        Feature.BATCH_PROMPT,
        Feature.SEED_PER_CHOICE,
        Feature.FORCED_OUTPUT,
        Feature.EMBEDDING_REPLACEMENT,
        Feature.PREDICTION,
        Feature.AUDIO,
        Feature.OUTPUT_LOGITS,
    }
)
VLLM_COMPLETION_DEFAULT = 16  # vLLM's max_tokens for a completion that names none


def wanted(header: str | None) -> bool | None:
    """The client's ``X-Gateway-Resume``: on, off, or None (absent or unreadable: the model decides)."""
    if header is None:
        return None
    value = header.strip().lower()
    return True if value in ("on", "1", "true") else False if value in ("off", "0", "false") else None


def can_continue(upstream: Upstream, request: InternalRequest | None = None) -> bool:
    how = CONTINUERS.get(upstream.provider)
    return how is not None and (how == "vllm" or request is None or request.operation is Operation.CHAT)


def applies(setting: bool | None, request: InternalRequest, upstreams: Sequence[Upstream]) -> bool:
    """Whether a stream of ``request`` is wrapped to resume: the switch (the client's header over the
    model's; unset, on where a target can continue), and a request one sequence can continue."""
    if setting is False or request.features & NOT_CONTINUABLE or request.choice_count != 1:
        return False
    if request.sampling.structured is not None or request.sampling.echo or request.sampling.beam is not None:
        return False
    return any(can_continue(u, request) for u in upstreams)


@dataclass(slots=True)
class Progress:
    """What the client was sent of the answer, read back when a break happens (relayed chunks by
    the target that sent them: ``replay``), or where a long stream's kept batches are folded
    (``Resumable.fold``): kept compactly, about the text's bytes and 12 bytes a token."""

    texts: list[str] = field(default_factory=list)  # the text, in pieces joined when read (``text``)
    chars: int = 0  # the text's length
    token_ids: array[int] = field(default_factory=lambda: array("i"))
    tokens: int = 0  # chunks that carried a token: the count when the stream had no ids
    ids_complete: bool = True  # every token chunk carried its id
    finished: bool = False
    stuck: str | None = None  # why the answer cannot be continued (a tool call in progress...)
    # Where the client's text is whole for the ids sent: after an event of one token that released
    # text, (ids, characters sent) pairs, flat. The server holds a token's text back while it ends
    # inside a character (byte-level BPE), an event of several tokens does not say which of them its
    # text covers, and vLLM keeps ``lag`` more characters back while a stop string could still match.
    marks: array[int] = field(default_factory=lambda: array("i"))
    lag: int = 0

    def add(self, event: StreamEvent) -> None:
        if isinstance(event, Delta):
            if event.tool_calls or event.reasoning:
                self.stuck = "a tool call or reasoning was in progress"
            if event.text or event.token_ids:
                self.texts.append(event.text)
                self.chars += len(event.text)
                self.tokens += max(1, len(event.token_ids))
                if event.token_ids:
                    self.token_ids.extend(event.token_ids)
                    if len(event.token_ids) == 1 and event.text:
                        self.marks.extend((len(self.token_ids), self.chars))
                else:
                    self.ids_complete = False
        elif isinstance(event, Finish):
            self.finished = True

    @property
    def text(self) -> str:
        """The text the client has."""
        self.pack()
        return self.texts[0]

    def pack(self) -> None:
        """The text's pieces joined into one string."""
        if len(self.texts) != 1:
            self.texts[:] = ["".join(self.texts)]

    def copy(self) -> Progress:
        return dataclasses.replace(
            self, texts=[self.text], token_ids=array("i", self.token_ids), marks=array("i", self.marks)
        )

    @property
    def sent(self) -> int:
        """Completion tokens the client has."""
        return len(self.token_ids) if self.ids_complete and self.token_ids else self.tokens

    @property
    def settled(self) -> int:
        """The ids whose text the client surely has whole: where a continuation from ids starts."""
        return self._junction()[0]

    @property
    def unsettled_text(self) -> str:
        """The text the client has past the ``settled`` ids."""
        return self.text[self._junction()[1] :]

    def _junction(self) -> tuple[int, int]:
        """The last mark whose text, the ``lag`` held back with it, the client has: (ids, characters)."""
        marks = self.marks
        for at in range(len(marks) - 2, -1, -2):
            if marks[at + 1] + self.lag <= self.chars:
                return marks[at], marks[at + 1] + self.lag
        return 0, 0


# a target's reader of what it relayed, one per stream read back: (request) → (a batch's chunks) → events
Replay = Callable[[InternalRequest], Callable[[list[bytes]], list[StreamEvent]]]


def held_back(s: Sampling) -> int:
    """The characters vLLM keeps back from a stream's text while a stop string could still match."""
    return max(map(len, s.stop)) - 1 if s.stop and not s.include_stop_str_in_output else 0


def read_back(
    batches: list[Batch], replay: Replay | None, request: InternalRequest, before: Progress | None
) -> Progress:
    """What the client has: ``before`` (the parts of earlier targets), then ``batches``."""
    progress = Progress(lag=held_back(request.sampling)) if before is None else before.copy()
    read_into(progress, batches, Reader(replay, request))
    return progress


class Reader:
    """A target's reader of its relayed chunks, one for the stream: made at the first relayed chunk
    (an Anthropic stream's events mean nothing without its first)."""

    __slots__ = ("read", "replay", "request")

    def __init__(self, replay: Replay | None, request: InternalRequest) -> None:
        self.replay, self.request = replay, request
        self.read: Callable[[list[bytes]], list[StreamEvent]] | None = None

    def __call__(self, relayed: list[bytes]) -> list[StreamEvent] | None:
        if self.replay is None:
            return None
        if self.read is None:
            self.read = self.replay(self.request)
        return self.read(relayed)


def read_into(progress: Progress, batches: list[Batch], reader: Reader) -> None:
    """``batches`` added to ``progress``, their relayed chunks read back by ``reader``."""
    for batch in batches:
        relayed = [ev.data if isinstance(ev, Token) else ev for ev in batch.events if isinstance(ev, Frame | Token)]
        if relayed:
            events = reader(relayed)
            if events is None:
                progress.stuck = "relayed chunks that its target cannot read back"
                return
            for ev in events:
                progress.add(ev)
        for ev in batch.events:
            if not isinstance(ev, Frame | Token):
                progress.add(ev)
    progress.pack()


def _less(value: int | None, sent: int) -> int | None:
    return None if value is None else max(1, value - sent)


def continuation(
    request: InternalRequest, progress: Progress, prompt_ids: Sequence[int] | None, how: str = "vllm"
) -> InternalRequest:
    """The request that continues ``request`` after ``progress`` on a target that continues ``how``
    (``CONTINUERS``): the sampling carried, the lengths shrunk by what was sent; ``prompt_ids``: the
    prompt's tokens, when the output's ids are known."""
    # the gateway's own request, never the client's body as it came: sent natively, that body would
    # start the answer over without the part already sent (a prefill, the ids, the partial message)
    request = dataclasses.replace(request, native=None, native_dialect=None)
    by_ids = _by_ids(request, progress, prompt_ids)
    sent = progress.settled if by_ids else progress.sent
    s = request.sampling
    max_tokens = s.max_tokens
    if max_tokens is None and request.operation is Operation.COMPLETION:
        max_tokens = VLLM_COMPLETION_DEFAULT
    sampling = dataclasses.replace(
        s,
        max_tokens=_less(max_tokens, sent),
        min_tokens=None if s.min_tokens is None else max(0, s.min_tokens - sent) or None,
        prompt_logprobs=None,
    )
    if request.operation is Operation.CHAT and how == "prefill":
        if progress.text != progress.text.rstrip():
            # Anthropic refuses a prefill that ends in whitespace, and one without it changes the text
            raise UpstreamFailed("the answer stopped after whitespace, which a prefill cannot end with")
        partial = ChatMessage("assistant", progress.text)
        return dataclasses.replace(request, messages=(*request.messages, partial), sampling=sampling)
    if by_ids:
        # the prompt (a chat's through its template) and the output as token ids, up to the junction
        # (``Progress.settled``): a completion, decoded into the events of the client's own stream (not
        # relayed where its chunks are a completion's, or repeat what the client has: ``Junction``)
        assert prompt_ids is not None
        ids = (*prompt_ids, *progress.token_ids[: progress.settled])
        exact = request.operation is not Operation.CHAT and progress.settled == len(progress.token_ids)
        return dataclasses.replace(
            request,
            operation=Operation.COMPLETION,
            prompts=(ids,),
            messages=(),
            chat=None,
            sampling=sampling,
            relay=request.relay if exact else None,
            features=request.features | {Feature.TOKEN_PROMPT},
        )
    if request.operation is Operation.CHAT:
        partial = ChatMessage("assistant", progress.text)
        extra: Mapping[str, object] = {
            **(request.extra_body or {}),
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
        features = request.features | {Feature.EXTRA_BODY}
        return dataclasses.replace(
            request, messages=(*request.messages, partial), sampling=sampling, extra_body=extra, features=features
        )
    prompt = request.prompts[0]
    if isinstance(prompt, tuple):  # token ids, but the output's ids are unknown: nothing exact to send
        raise UpstreamFailed("the answer's token ids are unknown: it cannot be continued from its prompt's ids")
    return dataclasses.replace(request, prompts=(prompt + progress.text,), sampling=sampling)


def _by_ids(request: InternalRequest, progress: Progress, prompt_ids: Sequence[int] | None) -> bool:
    """Whether the continuation is from token ids (else from text): a chat without ``max_tokens`` keeps
    its length to the context, which a completion would cut to vLLM's default."""
    chat_unbounded = request.operation is Operation.CHAT and request.sampling.max_tokens is None
    return prompt_ids is not None and progress.ids_complete and bool(progress.token_ids) and not chat_unbounded


@dataclass(slots=True)
class Junction:
    """Where a continuation's events join the client's stream. From ids it starts at the last settled
    token (``Progress.settled``): fed a prompt that ends inside a character, vLLM 0.32 writes text that
    is not the unbroken run's (tokenizers' ``DecodeStream`` primed with it has given the prompt's own
    start, ``<|user|>he``), and a continuation finds stop strings in its own output alone, so the
    tokens after the junction are generated again, and their ids and text, which the client has, are
    dropped here. ``moved``: the continuation's prompt tokens that are the answer's (its usage bills
    them as output)."""

    moved: int
    ids: int = 0
    text: str = ""

    @classmethod
    def after(cls, request: InternalRequest, progress: Progress, prompt_ids: Sequence[int] | None) -> Junction:
        if not _by_ids(request, progress, prompt_ids):
            return cls(progress.sent)
        return cls(progress.settled, len(progress.token_ids) - progress.settled, progress.unsettled_text)

    def join(self, events: list[StreamEvent]) -> list[StreamEvent]:
        """``events`` as the rest of the client's stream."""
        return stitched([self._drop(ev) if isinstance(ev, Delta) else ev for ev in events], self.moved)

    def _drop(self, ev: Delta) -> Delta:
        if not (self.ids or self.text):
            return ev
        ids, self.ids = min(self.ids, len(ev.token_ids)), self.ids - min(self.ids, len(ev.token_ids))
        chars = min(len(self.text), len(ev.text))
        if ev.text[:chars] != self.text[:chars]:  # greedy and exact, the engine writes the same again
            throttled.warning("junction", "a continuation's text differs from what the client has")
        self.text = self.text[chars:]
        return dataclasses.replace(ev, text=ev.text[chars:], token_ids=ev.token_ids[ids:], logprobs=ev.logprobs[ids:])


def stitched(events: list[StreamEvent], sent: int) -> list[StreamEvent]:
    """A continuation's events as the rest of the client's stream: no second identity or role, and
    its usage with the sent tokens moved from prompt back to completion."""
    out: list[StreamEvent] = []
    for ev in events:
        if isinstance(ev, StreamStart):
            continue
        if isinstance(ev, Delta):
            ev = ev if ev.role is None else dataclasses.replace(ev, role=None)
            if not (ev.text or ev.token_ids or ev.logprobs or ev.tool_calls or ev.reasoning):
                continue  # nothing left once its role (or, at a junction, what the client has) is gone
        elif isinstance(ev, UsageReport):
            ev = UsageReport(moved_back(ev.usage, sent))
        out.append(ev)
    return out


def moved_back(usage: Usage, sent: int) -> Usage:
    """A continuation's usage with the ``sent`` tokens it took as prompt counted as completion."""
    moved = min(sent, usage.prompt_tokens)
    return dataclasses.replace(
        usage, prompt_tokens=usage.prompt_tokens - moved, completion_tokens=usage.completion_tokens + moved
    )


@dataclass(slots=True)
class Resumed:
    """One continuation, for logs, metrics and the scorecard."""

    broken: str  # the target that broke
    target: str  # the one that continued
    cause: str  # the break's error code
    lost: float  # seconds from the break to the continuation's first event
    tokens: int  # completion tokens the client had at the break
    dropped: tuple[Feature, ...] = ()  # the features the continuing target went without


Opener = Callable[[Upstream, InternalRequest, int], Batches]  # (target, request, try number) → its stream
# A target to continue on, with the request as fitted to it (``dispatch``) and the features it drops
Fitted = tuple[Upstream, InternalRequest, list[Feature]]


@dataclass(slots=True)
class Resumer:
    """What ``resumable`` needs of dispatch: the targets in the order to try, each with the request as
    fitted to it (a continuation starts from that one, never from another target's) and its drops, how
    to open a stream on a target, and where to record each continuation."""

    targets: list[Fitted]  # in the order to try, the first's the one that answered first
    open: Opener
    call: Call
    max_resumes: int
    record: list[Resumed]
    failed: Callable[[Upstream, GatewayError], None]  # the break counted against the target's health
    tries: int = 1

    @property
    def request(self) -> InternalRequest:
        """The request as the first target to answer got it (what the client's stream follows)."""
        return self.targets[0][1]

    async def resume(
        self, broken: Upstream, err: GatewayError, progress: Progress
    ) -> tuple[Upstream, Batches, Batch, Junction]:
        """A continuation's stream and its first events, from the first target that opens one; the
        break's error when none can."""
        began = time.perf_counter()
        # a broken pool is tried again first (another replica)
        again = [t for t in self.targets if t[0] is broken and len(getattr(broken, "members", ())) > 1]
        for upstream, fitted, drops in again + [t for t in self.targets if t[0] is not broken]:
            if len(self.record) >= self.max_resumes or not self._time_left():
                break
            if not can_continue(upstream, fitted):
                continue
            try:
                ids = await self._prompt_ids(upstream, fitted, progress)
                req = continuation(fitted, progress, ids, CONTINUERS[upstream.provider])
                junction = Junction.after(fitted, progress, ids)
            except GatewayError:
                continue
            self.tries += 1
            events = self.open(upstream, req, self.tries)
            try:
                first = await anext(events)
            except (GatewayError, StopAsyncIteration) as exc:
                await events.aclose()  # type: ignore[attr-defined]
                why = exc.code if isinstance(exc, GatewayError) else "closed"
                throttled.warning(
                    f"continuation:{upstream.name}",
                    "continuation on %s failed before its first byte (%s)",
                    upstream.name,
                    why,
                )
                if isinstance(exc, UpstreamRejected):
                    break  # the continuation itself was refused: another target would refuse it too
                continue
            lost = time.perf_counter() - began
            self.record.append(Resumed(broken.name, upstream.name, err.code, lost, progress.sent, tuple(drops)))
            log.info(
                "stream resumed on %s after %d tokens (%s at %s)", upstream.name, progress.sent, err.code, broken.name
            )
            log.debug("continuation of %s on %s: %r after %r", broken.name, upstream.name, req, progress)
            return upstream, events, first, junction
        raise err

    def _time_left(self) -> bool:
        left = self.call.remaining()
        return left is None or left > 0

    async def _prompt_ids(self, upstream: Upstream, req: InternalRequest, progress: Progress) -> tuple[int, ...] | None:
        if CONTINUERS[upstream.provider] != "vllm" or not (progress.ids_complete and progress.token_ids):
            return None
        prompt = req.prompts[0] if req.operation is Operation.COMPLETION else None
        if isinstance(prompt, tuple):
            return prompt
        tokenize: Callable[[InternalRequest, Call], Awaitable[list[int]]] | None = getattr(upstream, "prompt_ids", None)
        if tokenize is None:
            return None
        try:
            return tuple(await tokenize(req, self.call))
        except GatewayError as exc:  # the text continues it then: not always token for token
            what = "no prompt ids from %s (%s): continuing from text"
            throttled.warning(f"prompt-ids:{upstream.name}", what, upstream.name, exc.code)
            return None


# What a stream that may resume keeps of what the client has (docs/vllm.md, "Streams that survive"):
# the batches relayed since the last fold as they came (a one-token batch holds about 420 bytes), at
# most ``KEEP_BATCHES``; then folded: each run of relayed chunks joined into one (about 230 bytes a
# token of vLLM's, the objects around them gone), read back only if the stream breaks (reading back is
# a JSON parse a chunk, some 60k instructions: more than relaying it). Past ``KEPT_BYTES`` of them the
# part is no longer kept: a break after that ends the stream with the break's error, never with a
# continuation from part of the answer. What earlier parts sent is kept read back (``Progress``).
KEEP_BATCHES = 1024
KEPT_BYTES = 1 << 23


RELAYED = frozenset({bytes, Frame})  # the types of a relayed chunk's bytes (a ``Token``'s, a ``Frame``)


def _relayed(item: object) -> bool:
    return isinstance(item, bytes)


class Resumable:
    """A stream (its first batch already with the client) that survives breaks: read by the relay,
    which appends each batch it writes to ``kept`` and, at a ``GatewayError``, asks ``recover`` for the
    rest (``gateway/web/relay.py``), so an unbroken stream costs an append a batch and no layer of
    its own; any other reader iterates it as one stream."""

    __slots__ = ("before", "current", "folded", "held", "kept", "resumer", "source", "whole")

    def __init__(self, upstream: Upstream, first: Batch, events: Batches, resumer: Resumer) -> None:
        self.current = events  # the part being relayed: the target's own stream until a break
        self.kept = [first]  # what the client has of it, since the last fold (the relay appends)
        self.folded: list[Batch] | None = []  # what it had before, folded; None: past ``KEPT_BYTES``
        self.held = 0  # the bytes of the relayed chunks folded
        self.source, self.resumer = upstream, resumer
        self.before: Progress | None = None  # what the client had of earlier parts (targets that broke)
        self.whole: Batches | None = None  # the stream as one, for a reader other than the relay

    def fold(self) -> None:
        """``kept`` folded: a long stream's memory bounded (``KEEP_BATCHES``, ``KEPT_BYTES``)."""
        folded = self.folded
        if folded is not None:
            items = [ev.data if type(ev) is Token else ev for batch in self.kept for ev in batch.events]
            if set(map(type, items)) <= RELAYED:  # all relayed, as a model server's stream mostly is
                items = [b"".join(items)]  # type: ignore[arg-type]  # (bytes, by their types)
            for relayed, run in groupby(items, _relayed):
                if relayed:
                    joined = b"".join(run)  # type: ignore[arg-type]  # (bytes, by the key)
                    self.held += len(joined)
                    folded.append(Batch([Token(joined)]))  # (read back as relayed: whole events)
                else:
                    folded.append(Batch(list(run)))  # type: ignore[arg-type]  # (events, by the key)
            if self.held > KEPT_BYTES:
                self.folded = None
        self.kept.clear()

    async def recover(self, err: GatewayError) -> Batch:
        """After ``err`` broke the current part: the continuation's first batch, with ``current`` its
        stream; ``err`` again when the answer cannot be continued."""
        await self.current.aclose()  # type: ignore[attr-defined]
        if self.folded is None:  # longer than what is kept
            throttled.warning("too-long", "a stream past %d bytes kept broke: not resumed", KEPT_BYTES)
            raise err
        request = self.resumer.request
        progress = self.before or Progress(lag=held_back(request.sampling))
        read_into(progress, self.folded + self.kept, Reader(getattr(self.source, "replay", None), request))
        if progress.finished or progress.stuck is not None:
            raise err
        self.resumer.failed(self.source, err)
        self.source, events, head, junction = await self.resumer.resume(self.source, err, progress)
        self.before, self.folded, self.held = progress, [], 0
        self.current = joined(events, junction, self.resumer.call.progress)
        first = Batch(junction.join(head.events), head.then)
        self.kept = [first]
        return first

    def __aiter__(self) -> Resumable:
        return self

    def __anext__(self) -> Awaitable[Batch]:
        if self.whole is None:
            self.whole = self._batches()
        return self.whole.__anext__()

    async def _batches(self) -> Batches:
        while True:
            try:
                async for batch in self.current:
                    self.kept.append(batch)
                    if len(self.kept) >= KEEP_BATCHES:
                        self.fold()
                    yield batch
                return
            except GatewayError as err:
                head = await self.recover(err)
                if head.events:
                    yield head

    async def aclose(self) -> None:
        """The upstream's stream closed (the client went away): now, not at GC."""
        if self.whole is not None:
            await self.whole.aclose()  # type: ignore[attr-defined]
        await self.current.aclose()  # type: ignore[attr-defined]


async def joined(events: Batches, junction: Junction, progress: StreamProgress | None = None) -> Batches:
    """A continuation's batches as the rest of the client's stream (``Junction``). ``progress``: where
    its target leaves its usage when the stream ends short (the client gone), which a cut stream is
    settled by: as its usage report, with the tokens sent moved back from prompt to completion (else
    they were charged twice, the prompt past its bound by them)."""
    before = progress.usage if progress is not None else None
    try:
        async for batch in events:
            yield Batch(junction.join(batch.events), batch.then)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
        if progress is not None and progress.usage is not None and progress.usage is not before:
            progress.usage = moved_back(progress.usage, junction.moved)


def resumable(upstream: Upstream, first: Batch, events: Batches, resumer: Resumer) -> Resumable:
    """``events`` (after ``first``, already with the client) as one stream that survives breaks."""
    return Resumable(upstream, first, events, resumer)

"""The pure parts of mid-stream resume (``gateway/routing/resume.py``): which requests may resume, what
the client was sent, the continuation's request, and its events stitched into the client's stream."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from gateway.core.errors import UpstreamFailed
from gateway.core.request import ChatMessage, Feature, InternalRequest, Operation, Sampling, StructuredOutput
from gateway.core.response import Batch, Delta, Finish, Frame, StreamStart, Then, Token, Usage, UsageReport
from gateway.core.upstream import Call, StreamProgress
from gateway.dialects.anthropic.egress import ANTHROPIC_WIRE
from gateway.routing import resume


@dataclass
class Target:
    provider: str
    name: str = "t"
    features: frozenset[Feature] = field(default_factory=frozenset)


COMPLETION = InternalRequest(
    Operation.COMPLETION, "m", prompts=("say",), sampling=Sampling(max_tokens=10, min_tokens=4, seeds=(7,)), stream=True
)
CHAT = InternalRequest(
    Operation.CHAT, "m", messages=(ChatMessage("user", "hi"),), sampling=Sampling(max_tokens=10), stream=True
)
VLLM, OPENAI, ANTHROPIC = Target("vllm"), Target("openai"), Target("anthropic")


def sent(*pieces: tuple[str, tuple[int, ...]]) -> resume.Progress:
    return resume.read_back([Batch([Delta(0, text, ids) for text, ids in pieces])], None, COMPLETION, None)


def test_who_may_resume() -> None:
    assert resume.applies(None, COMPLETION, [OPENAI, VLLM])  # unset: on where a target can continue
    assert not resume.applies(None, COMPLETION, [OPENAI])  # OpenAI's API cannot continue
    assert not resume.applies(False, COMPLETION, [VLLM])  # switched off
    assert not resume.applies(None, COMPLETION, [ANTHROPIC])  # a prefill continues chats only
    assert resume.applies(None, CHAT, [ANTHROPIC])
    for feature in (Feature.TOOLS, Feature.JSON_SCHEMA, Feature.N, Feature.ECHO, Feature.REASONING):
        assert not resume.applies(True, _with(CHAT, features=frozenset({feature})), [VLLM])
    structured = _with(CHAT, sampling=Sampling(structured=StructuredOutput("json_object")))
    assert not resume.applies(True, structured, [VLLM])


def _fields(req: InternalRequest) -> dict[str, object]:
    return {name: getattr(req, name) for name in req.__dataclass_fields__}


def _with(req: InternalRequest, **changes: object) -> InternalRequest:
    return InternalRequest(**{**_fields(req), **changes})


@pytest.mark.parametrize(
    ("header", "want"), [("on", True), ("OFF", False), (" 0 ", False), ("true", True), ("maybe", None), (None, None)]
)
def test_the_header_reads_on_off_or_nothing(header: str | None, want: bool | None) -> None:
    assert resume.wanted(header) is want


def test_a_completion_continues_from_the_prompt_and_the_ids_sent() -> None:
    progress = sent((" a", (5,)), (" b", (6,)))
    cont = resume.continuation(COMPLETION, progress, (1, 2))
    assert cont.prompts == ((1, 2, 5, 6),) and Feature.TOKEN_PROMPT in cont.features
    assert cont.sampling.max_tokens == 8 and cont.sampling.min_tokens == 2 and cont.sampling.seeds == (7,)


def test_without_ids_a_text_prompt_continues_from_text_and_an_ids_prompt_cannot() -> None:
    progress = sent((" a", ()), (" b", ()))
    assert progress.sent == 2 and not progress.ids_complete
    assert resume.continuation(COMPLETION, progress, (1, 2)).prompts == ("say a b",)
    with pytest.raises(Exception, match="token ids are unknown"):
        resume.continuation(_with(COMPLETION, prompts=((1, 2),)), progress, None)


def test_a_chat_continues_its_partial_message() -> None:
    progress = sent((" a", ()), (" b", ()))
    cont = resume.continuation(CHAT, progress, None)
    assert cont.messages[-1] == ChatMessage("assistant", " a b") and cont.sampling.max_tokens == 8
    assert cont.extra_body == {"continue_final_message": True, "add_generation_prompt": False}
    prefill = resume.continuation(CHAT, progress, None, "prefill")
    assert prefill.messages[-1] == ChatMessage("assistant", " a b") and prefill.extra_body is None
    with pytest.raises(Exception, match="whitespace"):
        resume.continuation(CHAT, sent((" a ", ())), None, "prefill")


@pytest.mark.parametrize(
    ("request_", "ids", "how"),
    [(COMPLETION, (1, 2), "vllm"), (COMPLETION, None, "vllm"), (CHAT, None, "vllm"), (CHAT, None, "prefill")],
    ids=["completion-ids", "completion-text", "chat-text", "prefill"],
)
def test_a_continuation_never_carries_the_clients_own_body(
    request_: InternalRequest, ids: tuple[int, ...] | None, how: str
) -> None:
    """Sent natively (an Anthropic client's body to an Anthropic target, or to vLLM's /v1/messages),
    the client's body would start the answer over, without what was already sent."""
    body = {"model": "m", "messages": [{"role": "user", "content": "say"}], "max_tokens": 10}
    progress = sent(("a", (5,)), (" b", (6,))) if ids else sent(("a", ()), (" b", ()))
    cont = resume.continuation(_with(request_, native=body), progress, ids, how)
    assert cont.native is None
    if how == "prefill":
        encoded = ANTHROPIC_WIRE.encode(cont, "m")
        assert encoded["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "a b"}]}


def test_a_vllm_completion_without_max_tokens_keeps_vllm_s_default_in_all() -> None:
    cont = resume.continuation(_with(COMPLETION, sampling=Sampling()), sent((" a", (5,))), (1,))
    assert cont.sampling.max_tokens == resume.VLLM_COMPLETION_DEFAULT - 1


def test_tool_calls_or_a_finish_are_seen() -> None:
    tools = resume.read_back([Batch([Delta(0, "", (), tool_calls=({"id": "x"},))])], None, CHAT, None)
    assert tools.stuck is not None
    done = resume.read_back([Batch([Delta(0, " a", (5,)), Finish(0, "stop")])], None, CHAT, None)
    assert done.finished


def test_the_continuation_is_stitched_into_one_stream() -> None:
    events = [
        StreamStart("id2", 1, "m"),
        Delta(0, "", (), role="assistant"),
        Delta(0, " c", (7,), role="assistant"),
        Finish(0, "length"),
        UsageReport(Usage(prompt_tokens=12, completion_tokens=8)),
    ]
    assert resume.stitched(events, 2) == [
        Delta(0, " c", (7,)),
        Finish(0, "length"),
        UsageReport(Usage(prompt_tokens=10, completion_tokens=10)),  # the sent tokens billed once, as output
    ]


def test_relayed_chunks_are_read_back_by_their_target() -> None:
    readers = []

    def replay(req: InternalRequest) -> Callable[[list[bytes]], list[object]]:
        def read(relayed: list[bytes]) -> list[object]:
            assert relayed == [b"data: x\n\n"]
            return [Delta(0, " r", (9,))]

        readers.append(read)
        return read

    batch = Batch([Token(b"data: x\n\n"), Delta(0, " d", (3,))])
    progress = resume.read_back([batch, batch], replay, COMPLETION, sent((" a", (5,))))
    assert (progress.text, list(progress.token_ids), progress.sent) == (" a r d r d", [5, 9, 3, 9, 3], 5)
    assert len(readers) == 1  # one reader for the stream: a stream's later events may need its first
    assert resume.read_back([Batch([Frame(b"data: x\n\n")])], None, COMPLETION, None).stuck is not None


def test_a_continuation_from_ids_starts_where_the_text_is_whole() -> None:
    """A token whose text the server still holds (it ends inside a character), or an event of several
    tokens, is generated again: the client's text and ids agree only up to the last token alone
    with its text."""
    progress = sent((" a", (5,)), ("", (6,)), ("é", (7, 8)))
    assert (progress.settled, progress.unsettled_text, progress.sent) == (1, "é", 4)
    cont = resume.continuation(COMPLETION, progress, (1, 2))
    assert cont.prompts == ((1, 2, 5),) and cont.sampling.max_tokens == 9 and cont.relay is None
    junction = resume.Junction.after(COMPLETION, progress, (1, 2))
    events = [StreamStart("id2", 1, "m"), Delta(0, "", (6,)), Delta(0, "", (7,)), Delta(0, "é", (8,))]
    events += [Delta(0, " b", (9,)), UsageReport(Usage(prompt_tokens=3, completion_tokens=9))]
    first, rest = junction.join(events[:2]), junction.join(events[2:])
    assert first == [] and rest == [Delta(0, " b", (9,)), UsageReport(Usage(prompt_tokens=2, completion_tokens=10))]


def test_from_text_nothing_is_generated_again() -> None:
    progress = sent((" a", ()), (" b", ()))
    assert resume.Junction.after(COMPLETION, progress, None) == resume.Junction(2)


def test_with_a_stop_string_the_junction_is_before_the_characters_held_back() -> None:
    """vLLM holds a stream's last ``len(stop) - 1`` characters back while the stop string could still
    match: the client's text is the ids' text but those, so the ids that wrote them are generated again."""
    request = _with(COMPLETION, sampling=Sampling(max_tokens=10, stop=("abc", "x")))
    progress = resume.read_back([Batch([Delta(0, t, ids) for t, ids in PIECES])], None, request, None)
    assert (progress.lag, progress.settled, progress.unsettled_text) == (2, 2, "")
    assert resume.Junction.after(request, progress, (1,)) == resume.Junction(2, 2, "")
    included = _with(request, sampling=Sampling(stop=("abc",), include_stop_str_in_output=True))
    assert resume.read_back([Batch([Delta(0, t, ids) for t, ids in PIECES])], None, included, None).settled == 4


PIECES = [(" a", (5,)), (" b", (6,)), ("", (7,)), (" c", (8,))]


class Resumes:
    """A ``Resumer`` that continues once, with ``rest``, and keeps what it was asked to continue after."""

    def __init__(self, request: InternalRequest, rest: list[Batch]) -> None:
        self.request, self.rest = request, rest
        self.after: list[resume.Progress] = []
        self.call = Call("r")  # where a continuation cut short leaves its usage

    def failed(self, target: object, err: object) -> None:
        pass

    async def resume(self, broken: object, err: object, progress: resume.Progress) -> tuple[object, ...]:
        self.after.append(progress.copy())

        async def events() -> resume.Batches:
            for batch in self.rest:
                yield batch

        return VLLM, events(), Batch([]), resume.Junction(0)


@dataclass
class Replaying(Target):
    """A target whose relayed chunks, ``data: <text>|<id>``, it reads back (joined ones too)."""

    def replay(self, req: InternalRequest) -> Callable[[list[bytes]], list[object]]:
        def read(relayed: list[bytes]) -> list[object]:
            events = [e[6:].split(b"|") for raw in relayed for e in raw.split(b"\n\n") if e]
            return [Delta(0, text.decode(), (int(i),)) for text, i in events]

        return read


TARGET = Replaying("vllm")


def _broken(pieces: int) -> resume.Batches:
    """Tokens 1 to ``pieces`` - 1, relayed but every third decoded, then a reset."""

    async def events() -> resume.Batches:
        for i in range(1, pieces):
            yield Batch([Delta(0, "ab", (i,)) if i % 3 == 0 else Token(b"data: ab|%d\n\n" % i)])
        raise UpstreamFailed("reset")

    return events()


async def _read(stream: resume.Resumable, sizes: list[int]) -> list[Batch]:
    got = []
    async for batch in stream:
        got.append(batch)
        sizes.append(len(stream.kept))
    return got


async def test_a_long_stream_keeps_what_it_sent_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``KEEP_BATCHES`` the batches kept are folded (runs of relayed chunks joined): memory stays
    bounded, and a break continues from all of it, in order."""
    monkeypatch.setattr(resume, "KEEP_BATCHES", 4)
    resumer = Resumes(COMPLETION, [Batch([Finish(0, "stop")])])
    stream = resume.Resumable(TARGET, Batch([Delta(0, "ab", (0,))]), _broken(10), resumer)  # type: ignore[arg-type]
    sizes: list[int] = []
    got = await _read(stream, sizes)
    assert max(sizes) < 4 and len(got) == 10 and isinstance(got[-1].events[0], Finish)
    (progress,) = resumer.after
    assert (progress.text, list(progress.token_ids), progress.settled) == ("ab" * 10, list(range(10)), 10)


async def test_past_what_a_stream_keeps_a_break_ends_with_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer longer than resume keeps is not continued (from a part of it, or from nothing): the
    client gets the break's error, and the stream holds nothing more of it."""
    monkeypatch.setattr(resume, "KEEP_BATCHES", 2)
    monkeypatch.setattr(resume, "KEPT_BYTES", 40)
    resumer = Resumes(COMPLETION, [Batch([Finish(0, "stop")])])
    stream = resume.Resumable(TARGET, Batch([Delta(0, "ab", (0,))]), _broken(10), resumer)  # type: ignore[arg-type]
    with pytest.raises(UpstreamFailed, match="reset"):
        await _read(stream, [])
    assert not resumer.after and stream.folded is None and len(stream.kept) < 2


class Written:
    """What the relay needs of a response, an encoder and a request's log: the text written."""

    continuable = True

    def __init__(self) -> None:
        self.out = b""

    async def write(self, data: bytes) -> None:
        self.out += data

    def event(self, ev: object) -> bytes:
        if isinstance(ev, Token):
            return ev.data[6:].split(b"|")[0]
        return ev.text.encode() if isinstance(ev, Delta) else b"|" if isinstance(ev, Finish) else b""

    def token(self, size: int) -> None:
        pass

    def observe(self, events: object) -> None:
        pass


async def test_the_relay_keeps_and_folds_a_resumable_stream_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The relay reads a ``Resumable``'s target stream directly: it keeps each batch it writes (folded
    past ``KEEP_BATCHES``) and continues after a break from everything the client has."""
    from gateway.web import relay

    monkeypatch.setattr(relay, "KEEP_BATCHES", 4)
    resumer = Resumes(COMPLETION, [Batch([Delta(0, "cd", (10,))]), Batch([Finish(0, "stop")], Then.END)])
    stream = resume.Resumable(TARGET, Batch([Delta(0, "ab", (0,))]), _broken(10), resumer)  # type: ignore[arg-type]
    io = Written()
    writer = relay.Relay(io, io, io)  # type: ignore[arg-type]
    await writer.run(Batch([Delta(0, "ab", (0,))]), stream, lambda: False)
    assert io.out + writer.out == b"ab" * 10 + b"cd|" and len(stream.kept) < 4
    (progress,) = resumer.after
    assert (progress.text, list(progress.token_ids)) == ("ab" * 10, list(range(10)))


@pytest.mark.parametrize("cut", [True, False])
async def test_a_continuation_cut_short_leaves_its_usage_with_the_tokens_sent_moved_back(cut: bool) -> None:
    """A cut stream is settled by the usage its target left (``StreamProgress``): a continuation's, with
    the 3 tokens it took as prompt counted as completion, as its usage report is stitched. One that
    ended leaves none of its own: the broken target's is not touched."""
    progress = StreamProgress()
    progress.usage = broken = Usage(6, 3)

    async def continuation() -> resume.Batches:
        ended = False
        try:
            yield Batch([Delta(0, text=" a")])
            yield Batch([Delta(0, text=" b")])
            ended = True
        finally:
            if not ended:  # as ``adapters.http`` leaves it
                progress.usage = Usage(9, 1)

    stream = resume.joined(continuation(), resume.Junction(3), progress)
    if cut:
        await anext(stream)
        await stream.aclose()
        assert progress.usage == Usage(6, 4)
    else:
        assert len([b async for b in stream]) == 2
        assert progress.usage is broken

"""A relayed stream reaches every OpenAI-shaped dialect as its decoded twin would: the same chunks,
key for key, whatever the texts spell and wherever the network cuts the reads. The relayed path
writes the upstream's content chunks retouched in bytes (``gateway/dialects/openai/relay.py``); the
decoded path parses and re-encodes each one."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.http import HTTPUpstream
from gateway.core.request import Operation
from gateway.core.response import Frame, StreamEvent, StreamStart, Token
from gateway.dialects import FRIENDLI, FRIENDLI_2024, OCTOAI, OPENAI, SGP_V5, Dialect
from gateway.dialects.openai.egress import OPENAI_WIRE, VLLM_WIRE
from gateway.dialects.openai.relay import Retouch, removal, without_key
from gateway.dialects.sse import SSEParser
from gateway.runtime.config import parse_config

JSON = Any
CFG = parse_config({"models": [{"name": "m", "targets": [{"provider": "vllm", "base_url": "http://u"}]}]})
UPSTREAM = HTTPUpstream(CFG.models[0].targets[0], "m", VLLM_WIRE)
DIALECTS: dict[str, tuple[Dialect, str, str]] = {  # dialect, model name, flavour
    "openai": (OPENAI, "m", ""),
    "sgp": (SGP_V5, "openai/m", ""),
    "friendli": (FRIENDLI, "m", "serverless"),
    "friendli2024": (FRIENDLI_2024, "m", "serverless"),
    "octoai": (OCTOAI, "m", ""),
}
# Texts that spell what the retouch looks for, with quotes, escapes and newlines around it.
TEXTS = st.lists(
    st.sampled_from(['"system_fingerprint":null,', ',"usage":null', '"token_ids":[1]', "data: {", "\n\n", '\\"', "é"])
    | st.sampled_from(["system_fingerprint", "token_ids", "reasoning", ",", "}"])  # plain: a Token's text
    | st.text(min_size=1, max_size=8),
    min_size=1,
    max_size=4,
).map("".join)


QUIRKS = st.frozensets(st.sampled_from(["later_fp", "both_reasoning", "empty", "two_lines"]))


def upstream_stream(
    chat: bool,
    texts: list[str],
    fp: str | None,
    fp_key: bool,
    usage_key: bool,
    ids: bool | None,
    reasoning: bool = False,
    quirks: frozenset[str] = frozenset(),
) -> bytes:
    """``ids``: each token's ids (True), vLLM's null where it was not asked for them (None), or no key.
    ``quirks``: later chunks name another fingerprint than the first (Azure's first chunk has
    none); reasoning deltas carry both names; an empty object chunk; a chunk over two data: lines."""
    sent = 0

    def chunk(choice: dict[str, JSON], usage: JSON = None) -> bytes:
        nonlocal sent
        head: dict[str, JSON] = {"id": "c1", "object": "chat.completion.chunk" if chat else "text_completion"}
        head |= {"created": 1, "model": "m"}
        if fp_key:
            head["system_fingerprint"] = "fp_later" if "later_fp" in quirks and sent else fp
        body = head | {"choices": [choice] if choice else []}
        if usage_key or usage is not None:
            body["usage"] = usage
        line = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        sent += 1
        if "two_lines" in quirks and sent == 3:
            line = line.replace(',"choices":', ',\ndata: "choices":', 1)  # one JSON over two lines
        return b"data: " + line.encode() + b"\n\n"

    def choice(text: str, finish: str | None = None, token: int | None = None) -> dict[str, JSON]:
        out: dict[str, JSON] = {"index": 0}
        thinking = reasoning and token is not None and token % 2 == 0  # vLLM's name for it
        delta: dict[str, JSON] = {"reasoning" if thinking else "content": text}
        if thinking and "both_reasoning" in quirks:
            delta = {"reasoning_content": text, "reasoning": None}
        out |= {"delta": delta} if chat else {"text": text}
        out |= {"logprobs": None, "finish_reason": finish}
        if ids is not False and token is not None:
            out["token_ids"] = None if ids is None else [token - 1, token] if token % 3 == 0 else [token]
        return out

    first = choice("")
    if chat:
        first["delta"] = {"role": "assistant", "content": ""}
    body = chunk(first)
    if "empty" in quirks:
        body += b"data: {}\n\n"
    body += b"".join(chunk(choice(t, token=10 + i)) for i, t in enumerate(texts))
    body += chunk(choice("", "length")) + chunk({}, {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5})
    return body + b"data: [DONE]\n\n"


def client_stream(
    dialect: Dialect, body: dict[str, JSON], flavour: str, read: list[bytes], relay: bool, resumable: bool = False
) -> bytes:
    op = Operation.CHAT if "messages" in body else Operation.COMPLETION
    request = replace(dialect.parse(op, body, flavour), resumable=resumable)
    assert (request.relay is not None) == (dialect is not FRIENDLI_2024 or op is Operation.CHAT)
    if not relay:
        request = replace(request, relay=None)
    decoder, encoder, parser = VLLM_WIRE.reader(request), dialect.encoder(request), SSEParser()
    batch: list[StreamEvent] = []
    for piece in read:
        if UPSTREAM._take(piece, parser, decoder, batch):
            break
    assert not relay or request.relay is None or any(isinstance(e, Frame) for e in batch)
    return b"".join(encoder.event(e) for e in batch) + encoder.end()


def token_stream(
    dialect: Dialect,
    body: dict[str, JSON],
    flavour: str,
    read: list[bytes],
    as_read: bool = True,
    resumable: bool = False,
) -> tuple[bytes, int]:
    """``client_stream``'s relay as ``HTTPUpstream.stream`` runs it, and how many reads went out as
    Tokens: a read the decoder finds in the shape of the last shaped frame is passed on as it is
    (``as_read``; else every read takes the parser's path). ``resumable``: a stream that may resume,
    whose upstream is asked for its ids."""
    op = Operation.CHAT if "messages" in body else Operation.COMPLETION
    request = replace(dialect.parse(op, body, flavour), resumable=resumable)
    decoder, encoder, parser = VLLM_WIRE.reader(request), dialect.encoder(request), SSEParser()
    out, tokens = [], 0
    for piece in read:
        if as_read and decoder.relaying and parser.idle and decoder.same_shape(piece):
            out.append(encoder.event(Token(piece)))
            tokens += 1
            continue
        batch: list[StreamEvent] = []
        done = UPSTREAM._take(piece, parser, decoder, batch)
        out += [encoder.event(e) for e in batch]
        if done:
            break
    return b"".join(out) + encoder.end(), tokens


@pytest.mark.parametrize("name", sorted(DIALECTS))
@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("ids", [False, True])
def test_a_paced_stream_s_tokens_after_the_first_go_out_as_read(name: str, chat: bool, ids: bool) -> None:
    """With their ids too (Friendli's clients get each token's; a stream that may resume asks for
    them), though chunks then differ by them as well as by their texts."""
    dialect, model, flavour = DIALECTS[name]
    body: dict[str, JSON] = {"model": model, "stream": True}
    body |= {"messages": [{"role": "user", "content": "p"}]} if chat else {"prompt": "p"}
    texts = [" one", " two", ' "three"', " four", " five"]
    stream = upstream_stream(chat, texts, "fp_up", True, True, ids)
    read = [event + b"\n\n" for event in stream.split(b"\n\n")[:-1]]
    out, tokens = token_stream(dialect, body, flavour, read, resumable=ids)
    # the first text lends its shape; the quoted one takes the full check and the next lends it anew.
    # (Friendli 2024's completions are not relayed: its stream ends with the whole answer.)
    assert tokens == (0 if name == "friendli2024" and not chat else 2)
    assert out == token_stream(dialect, body, flavour, read, as_read=False, resumable=ids)[0]
    assert out == client_stream(dialect, body, flavour, read, relay=True, resumable=ids)


def chunks(stream: bytes) -> list[JSON]:
    events = [e for e in stream.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") and b"\n" not in e for e in events)
    return [json.loads(e[6:]) for e in events if e != b"data: [DONE]"]


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(DIALECTS)),
    chat=st.booleans(),
    texts=st.lists(TEXTS, min_size=1, max_size=6),
    fp=st.sampled_from([None, "", "fp_up", 'f"p']),
    fp_key=st.booleans(),
    usage_key=st.booleans(),
    include_usage=st.sampled_from([None, True, False]),
    ids=st.booleans(),
    reasoning=st.booleans(),
    quirks=QUIRKS,
    cuts=st.lists(st.integers(0, 4000), max_size=6),
)
def test_a_relayed_stream_matches_its_decoded_twin(
    name: str,
    chat: bool,
    texts: list[str],
    fp: str | None,
    fp_key: bool,
    usage_key: bool,
    include_usage: bool | None,
    ids: bool,
    reasoning: bool,
    quirks: frozenset[str],
    cuts: list[int],
) -> None:
    dialect, model, flavour = DIALECTS[name]
    body: dict[str, JSON] = {"model": model, "stream": True}
    body |= {"messages": [{"role": "user", "content": "p"}]} if chat else {"prompt": "p"}
    if include_usage is not None:
        body["stream_options"] = {"include_usage": include_usage}
    # token ids come only from upstreams asked for them: for clients whose dialect returns them
    ids = ids and (name.startswith("friendli") or name == "openai")
    if ids and name == "openai":
        body["return_token_ids"] = True
    stream = upstream_stream(chat, texts, fp, fp_key, usage_key, ids, reasoning, quirks)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    read = [stream[a:b] for a, b in itertools.pairwise(bounds)]

    relayed = client_stream(dialect, body, flavour, read, relay=True)
    decoded = client_stream(dialect, body, flavour, read, relay=False)
    # one event per read, as a model server writes: to the byte, whether a token goes out as read
    # (a Token) or as a frame
    one_by_one = [event + b"\n\n" for event in stream.split(b"\n\n")[:-1]]
    as_read = token_stream(dialect, body, flavour, one_by_one)[0]
    assert as_read == token_stream(dialect, body, flavour, one_by_one, as_read=False)[0]
    assert relayed.endswith(b"data: [DONE]\n\n") == decoded.endswith(b"data: [DONE]\n\n")
    ours, twins = chunks(relayed), chunks(decoded)
    if name == "friendli":
        assert all("system_fingerprint" not in c for c in ours)  # Friendli's chunks have none (§2.7)
    if name == "octoai":
        assert all(c["system_fingerprint"] for c in ours)  # octoai drops chunks without one
        assert sum("usage" in c for c in ours) == (include_usage is True)  # on the last content chunk
    if not include_usage and name != "sgp":
        assert all("usage" not in c or c["usage"] for c in ours)

    def same(chunk: JSON) -> JSON:
        # The relay passes what the upstream wrote where the decoded path writes null for nothing: an
        # absent (or empty) fingerprint stays so for OpenAI's style, an absent usage stays absent; a
        # reasoning delta has no content beside it, where the decoded path writes "".
        for c in chunk.get("choices") or ():
            delta = c.get("delta") or {}
            if "reasoning_content" in delta and delta.get("content") == "":
                del delta["content"]
            if "reasoning_content" in delta and delta.get("reasoning", 0) is None:
                del delta["reasoning"]  # the upstream's null beside it, passed on
        if name in ("openai", "sgp") and "later_fp" in quirks:
            chunk.pop("system_fingerprint", None)  # relayed byte for byte: each chunk's own, not the first's
        return {k: v for k, v in chunk.items() if v not in (None, "") or k not in ("system_fingerprint", "usage")}

    if reasoning and chat:
        assert all(c["delta"].get("reasoning") is None for x in ours for c in x["choices"])  # no text under it

    assert [same(c) for c in ours] == [same(c) for c in twins]


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(set(DIALECTS) - {"friendli", "friendli2024"})),  # (these show the ids)
    chat=st.booleans(),
    texts=st.lists(TEXTS, min_size=1, max_size=6),
    fp=st.sampled_from([None, "fp_up"]),
    include_usage=st.sampled_from([None, True]),
    reasoning=st.booleans(),
    quirks=QUIRKS,
)
def test_a_stream_that_may_resume_reaches_the_client_as_one_that_may_not(
    name: str,
    chat: bool,
    texts: list[str],
    fp: str | None,
    include_usage: bool | None,
    reasoning: bool,
    quirks: frozenset[str],
) -> None:
    """A stream that may resume asks vLLM for its ids, which the client's dialect does not show: it
    gets the bytes of the stream not asked for them (vLLM's null in their place), as read or in runs."""
    dialect, model, flavour = DIALECTS[name]
    body: dict[str, JSON] = {"model": model, "stream": True}
    body |= {"messages": [{"role": "user", "content": "p"}]} if chat else {"prompt": "p"}
    if include_usage is not None:
        body["stream_options"] = {"include_usage": include_usage}
    out = []
    for ids in (True, None):
        stream = upstream_stream(chat, texts, fp, True, True, ids, reasoning, quirks)
        one_by_one = [event + b"\n\n" for event in stream.split(b"\n\n")[:-1]]
        out.append([token_stream(dialect, body, flavour, read, resumable=bool(ids)) for read in (one_by_one, [stream])])
    assert out[0] == out[1]


def test_the_retouch_rewrites_keys_and_never_text() -> None:
    retouch = Retouch((without_key(b"usage", b"null"),), b'"system_fingerprint":"fp",', token_ids=True)
    text = json.dumps('x,"usage":null "token_ids":[1] \n\ndata: {')
    frame = b"".join(
        b'data: {"choices":[{"index":0,"text":' + text.encode() + b',"token_ids":[4,5]}],"usage":null}\n\n'
        for _ in range(2)
    )
    out = chunks(retouch(frame))
    assert out == [{"system_fingerprint": "fp", "choices": [{"index": 0, "text": json.loads(text), "token": 5}]}] * 2


def test_a_dropped_key_goes_wherever_each_chunk_spells_it() -> None:
    # the usual spelling (after other keys) from every chunk is looked for once; the other only when
    # some chunk did not have the usual one
    retouch = Retouch((without_key(b"usage", b"null"),))
    usual = b'data: {"id":"a","choices":[],"usage":null}\n\n'
    first = b'data: {"usage":null,"id":"a","choices":[]}\n\n'
    bare = b'data: {"id":"a","choices":[]}\n\n'
    for run in (usual * 2, usual + first, first + usual, bare + first, first):
        assert retouch(Frame.of(run, run.count(b"\n\n"))) == bare * run.count(b"\n\n")


def test_empty_token_lists_are_dropped_with_their_comma() -> None:
    for value in (b"[]", b"null"):
        for chunk in (b'{"index":0,"token_ids":' + value + b"}", b'{"token_ids":' + value + b',"index":0}'):
            assert json.loads(Retouch(token_ids=True)(chunk)) == {"index": 0}


def test_octoai_holds_back_only_the_finish_chunk_that_usage_joins() -> None:
    request = OCTOAI.parse(Operation.COMPLETION, {"model": "m", "prompt": "p", "stream": True}, "")
    request = replace(request, stream_usage=True)
    stream = upstream_stream(False, ["a", "b"], "fp", True, True, False)
    decoder, encoder, parser = VLLM_WIRE.reader(request), OCTOAI.encoder(request), SSEParser()
    batch: list[StreamEvent] = []
    out = []
    for event in stream.split(b"\n\n")[:-1]:  # one event per read, as a slow upstream sends them
        before = len(batch)
        UPSTREAM._take(event + b"\n\n", parser, decoder, batch)
        out.append(b"".join(encoder.event(e) for e in batch[before:]))
    out.append(encoder.end())
    first, a, b, finish, usage, done, end = out
    assert first == b""  # an empty text: nothing to say yet
    assert [c["choices"][0]["text"] for c in chunks(a) + chunks(b)] == ["a", "b"]  # each out as it came
    assert finish == usage == b"" and done == b""  # the finish chunk waits for the usage
    (last,) = chunks(end)
    assert last["choices"][0]["finish_reason"] == "length" and last["usage"]["total_tokens"] == 5


def test_a_frame_is_retouched_as_its_bytes_are() -> None:
    """A frame carries its event count (counted where it was cut): the retouch trusts it instead of
    counting again, and must come to what the same bytes come to."""
    kept = b'"system_fingerprint":"fp"'
    retouch = Retouch(fingerprint=removal(b"system_fingerprint", b'"fp"'), head=kept + b",", kept=kept)
    same = b'data: {"id":"a","system_fingerprint":"fp","choices":[]}\n\n' * 3
    mixed = same + b'data: {"id":"a","system_fingerprint":"other","choices":[]}\n\n'
    for run in (same, mixed):
        frame = Frame.of(run, run.count(b"\n\n"))
        assert retouch(frame) == retouch(bytes(run))
    assert retouch(Frame.of(same, 3)) == same  # every chunk names it already: untouched


def test_token_ids_are_looked_for_only_in_a_stream_whose_upstream_was_asked_for_them() -> None:
    """vLLM returns output ids only when asked (and OpenAI is never asked): a relayed frame of an
    upstream not asked is not searched for them, one asked has them turned into Friendli's token."""
    request = FRIENDLI.parse(Operation.COMPLETION, {"model": "m", "prompt": "p", "stream": True}, "serverless")
    head = b'data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
    first = head + b'"text":"","logprobs":null,"finish_reason":null}]}\n\n'
    content = head + b'"text":"a","logprobs":null,"finish_reason":null,"token_ids":[7]}]}\n\n'
    for wire, asked in ((VLLM_WIRE, True), (OPENAI_WIRE, False)):
        assert ("return_token_ids" in wire.encode(request, "m")) is asked
        decoder, encoder, batch = wire.reader(request), FRIENDLI.encoder(request), []
        UPSTREAM._take(first + content, SSEParser(), decoder, batch)
        start, frame = batch
        assert isinstance(start, StreamStart) and start.token_ids is asked and isinstance(frame, Frame)
        encoder.event(start)
        (chunk,) = chunks(encoder.event(frame))
        assert chunk["choices"][0].get("token") == (7 if asked else None)

"""Each dialect builds a plain completion body (a model, one text prompt, a length, temperature, top_p,
a stream and its options) by a short path (``plain_completion``). Its full parser is the reference:
for generated bodies, both paths give the same internal request, or the same error."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import GatewayError, InvalidRequest
from gateway.core.request import InternalRequest
from gateway.dialects.friendli import parse as friendli
from gateway.dialects.octoai import parse_completion as octoai_completion
from gateway.dialects.openai import parse as oai
from gateway.dialects.openai.schema import STREAM_FORMAT
from gateway.dialects.sgp import parse_completion as sgp_completion

# the module: the package's ``parse`` (a function) hides it as an attribute
messages_parse = importlib.import_module("gateway.dialects.anthropic.parse")
PARSERS: dict[str, Callable[[dict[str, Any]], InternalRequest]] = {
    "openai": lambda body: oai.parse_completion(body, STREAM_FORMAT),
    "friendli": lambda body: friendli.parse_completion(body, "serverless"),
    "friendli-dedicated": lambda body: friendli.parse_completion(body, "dedicated"),
    "friendli-2024": lambda body: friendli.parse_completion(body, "serverless", None),
    "sgp": sgp_completion,
    "octoai": octoai_completion,
}

numbers = st.one_of(st.none(), st.integers(-1, 3), st.floats(-0.5, 2.5, allow_nan=False))
bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiny", "openai/tiny", "ep-1:adapter", ""]), "prompt": st.text(max_size=8)},
    optional={
        "max_tokens": st.one_of(st.none(), st.integers(-1, 5000)),
        "temperature": numbers,
        "top_p": numbers,
        "stream": st.one_of(st.none(), st.booleans()),
        "stream_options": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"include_usage": st.booleans()})),
    },
)


def outcome(parse: Callable[[dict[str, Any]], InternalRequest], body: dict[str, Any]) -> object:
    try:
        return parse(body)
    except GatewayError as err:
        return (type(err), err.message, getattr(err, "param", None))


@pytest.mark.parametrize("dialect", sorted(PARSERS))
@settings(max_examples=300, deadline=None)
@given(body=bodies)
def test_the_plain_path_builds_what_the_full_parser_builds(dialect: str, body: dict[str, Any]) -> None:
    parse = PARSERS[dialect]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(friendli, "drawn_seed", lambda: (7,))  # the seed Friendli's parse draws, the same in both
        short = outcome(parse, body)
        mp.setattr(oai, "is_plain", lambda *_: False)
        full = outcome(parse, body)
    assert short == full


@pytest.mark.parametrize("dialect", sorted(PARSERS))
def test_a_plain_body_takes_the_plain_path(dialect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[InternalRequest] = []
    plain = oai.plain_completion

    def spy(*args: Any, **kwargs: Any) -> InternalRequest:
        taken.append(plain(*args, **kwargs))
        return taken[-1]

    monkeypatch.setattr(oai, "plain_completion", spy)
    body = {"model": "tiny", "prompt": "Say hello", "max_tokens": 16, "stream": True}
    assert PARSERS[dialect](body) == taken[0]
    PARSERS[dialect]({**body, "n": 2})  # any other field: the full parser
    assert len(taken) == 1


# Chat: a plain body (``typed_plain_chat`` on the raw body, ``plain_chat`` on the schema's) against the
# full parse, messages of every shape the schema takes (their parts are built by the same function on
# both paths) and values of the wrong type, fields outside the plain set included so that a body which
# must take the full path is seen to.
odd = st.sampled_from([True, 1.5, "1", [], {}, None])
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "bogus"])
messages = st.one_of(
    st.lists(st.fixed_dictionaries({"role": roles, "content": st.text(max_size=8)}), min_size=1, max_size=3),
    st.lists(
        st.fixed_dictionaries(
            {"role": st.one_of(roles, odd)},
            optional={
                "content": st.one_of(st.none(), st.text(max_size=8), st.just([{"type": "text", "text": "x"}]), odd),
                "name": st.sampled_from(["a", ""]),
                "tool_call_id": st.just("c1"),
            },
        ),
        max_size=3,
    ),
    odd,
)
chat_bodies = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from(["tiny", "openai/tiny", "", "m" * 257]), odd), "messages": messages},
    optional={
        "max_tokens": st.one_of(st.none(), st.integers(-1, 5000), st.just(2**24 + 1), odd),
        "max_completion_tokens": st.integers(1, 50),
        "temperature": numbers,
        "top_p": numbers,
        "stream": st.one_of(st.none(), st.booleans(), odd),
        "stream_options": st.one_of(
            st.none(),
            odd,
            st.fixed_dictionaries(
                {}, optional={"include_usage": st.one_of(st.booleans(), odd), "continuous_usage_stats": st.booleans()}
            ),
        ),
        "n": st.integers(1, 2),
        "user": st.just("u"),
        "logprobs": st.booleans(),
    },
)


# bodies of the plain fields only, most of which the raw path reads
plain_chat_bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(["tiny", ""]), "messages": messages},
    optional={
        "max_tokens": st.one_of(st.none(), st.integers(0, 3)),
        "temperature": numbers,
        "top_p": numbers,
        "stream": st.one_of(st.none(), st.booleans()),
        "stream_options": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"include_usage": st.booleans()})),
    },
)


@settings(max_examples=1000, deadline=None)
@given(body=st.one_of(plain_chat_bodies, chat_bodies), relay=st.sampled_from([STREAM_FORMAT, None]))
def test_the_plain_chat_path_builds_what_the_full_parser_builds(body: dict[str, Any], relay: str | None) -> None:
    short = outcome(lambda b: oai.parse_chat(b, relay), body)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(oai, "typed_plain_chat", lambda *_: None)
        plain = outcome(lambda b: oai.parse_chat(b, relay), body)
        mp.setattr(oai, "is_plain_chat", lambda *_: False)
        full = outcome(lambda b: oai.parse_chat(b, relay), body)
    assert short == plain == full
    if isinstance(short, InternalRequest):  # the same values, of the same types (1 == 1.0 == True)
        assert repr(short) == repr(full)


def test_a_plain_chat_body_takes_the_plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[InternalRequest] = []
    plain = oai.plain_chat
    monkeypatch.setattr(oai, "plain_chat", lambda *a: taken.append(plain(*a)) or taken[-1])
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 16, "stream": True}
    assert oai.parse_chat(body, STREAM_FORMAT) == taken[0]
    oai.parse_chat({**body, "n": 2}, STREAM_FORMAT)  # any other field: the full parser
    assert len(taken) == 1


@pytest.mark.parametrize(
    "change",
    [{"messages": [{"role": "user", "content": "q"}] * 2049}, {"temperature": float("nan")}, {"top_p": float("inf")}],
    ids=["past-the-cap", "nan", "inf"],
)
def test_a_plain_chat_body_check_refuses_is_refused_as_the_full_parse_refuses_it(change: dict[str, Any]) -> None:
    body = {"model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": "q"}], **change}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(oai, "typed_plain_chat", lambda *_: None)
        full = outcome(oai.parse_chat, body)
    assert outcome(oai.parse_chat, body) == full
    assert full[0] is InvalidRequest  # type: ignore[index]


def test_a_plain_chat_body_skips_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    schema: list[object] = []
    validated = oai.validated

    def spy(model: Any, data: dict[str, Any]) -> Any:
        schema.append(model)
        return validated(model, data)

    monkeypatch.setattr(oai, "validated", spy)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Say hello"}], "temperature": 1, "stream": True}
    assert oai.parse_chat({**body, "stream_options": {"include_usage": True}}).sampling.temperature == 1.0
    assert schema == []
    oai.parse_chat({**body, "messages": [{"role": "user", "content": "x", "name": "a"}]})  # a name: the schema
    assert len(schema) == 1


# Anthropic Messages: a plain body (``typed_plain``: turns of one text, a system string) against the
# full parse, turns and blocks of every shape and values of the wrong type, fields outside the plain set
# (an unknown one and a platform field among them) and betas, so that a body which must take the full
# path is seen to.
text_blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "bogus"])},
    optional={"text": st.one_of(st.text(max_size=4), odd), "cache_control": st.just({"type": "ephemeral"})},
)
turn_contents = st.one_of(st.text(max_size=6), st.lists(st.one_of(text_blocks, odd), max_size=2), odd)
turns = st.one_of(
    st.lists(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=6)}),
        min_size=1,
        max_size=3,
    ),
    st.lists(
        st.fixed_dictionaries(
            {"role": st.one_of(st.sampled_from(["user", "assistant", "system"]), odd)},
            optional={"content": turn_contents, "name": st.just("n")},
        ),
        max_size=3,
    ),
    odd,
)
unit_numbers = st.one_of(st.none(), st.integers(-1, 2), st.floats(-0.5, 1.5, allow_nan=False), odd)
messages_bodies = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from(["tiny", "", "m" * 257]), odd), "messages": turns},
    optional={
        "max_tokens": st.one_of(st.integers(-1, 5000), st.just(2**24 + 1), odd),
        "system": st.one_of(st.text(max_size=4), st.just([{"type": "text", "text": "s"}]), odd),
        "temperature": unit_numbers,
        "top_p": unit_numbers,
        "stream": st.one_of(st.booleans(), odd),
        "stop_sequences": st.just(["x"]),
        "top_k": st.just(3),
        "metadata": st.just({"user_id": "u"}),
        "container": st.just("c"),
        "bogus": st.just(1),
    },
)

# bodies of the plain fields only, most of which the typed path reads
words = st.text(min_size=1, max_size=4)
plain_turn = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "user", "assistant", "system"]),
        "content": st.one_of(
            words, st.builds(lambda k, t: [{"type": k, "text": t}], st.sampled_from(["text", "text", "image"]), words)
        ),
    }
)
plain_messages_bodies = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["tiny", "", "m" * 257]),
        "max_tokens": st.one_of(st.integers(1, 3), st.sampled_from([0, 2**24, 2**24 + 1])),
        "messages": st.lists(plain_turn, min_size=1, max_size=3)
        | st.sampled_from([[], [{"role": "user", "content": ""}]]),
    },
    optional={
        "system": st.one_of(st.none(), st.text(max_size=3)),
        "temperature": st.floats(0, 1) | st.sampled_from([1.5, 2, -0.1]) | unit_numbers,
        "top_p": st.floats(0, 1) | st.sampled_from([1.5, 2, -0.1]) | unit_numbers,
        "stream": st.one_of(st.none(), st.booleans()),
    },
)


@settings(max_examples=1000, deadline=None)
@given(body=st.one_of(plain_messages_bodies, messages_bodies), betas=st.sampled_from(["", "some-beta-2025-01-01"]))
def test_the_plain_messages_path_builds_what_the_full_parser_builds(body: dict[str, Any], betas: str) -> None:
    short = outcome(lambda b: messages_parse.parse(b, betas), body)
    full = outcome(lambda b: messages_parse.parse_full(b, betas), body)
    assert short == full
    if isinstance(short, InternalRequest):  # the same values, of the same types (1 == 1.0 == True)
        assert repr(short) == repr(full)


def test_a_plain_messages_body_past_the_caps_is_refused_as_the_full_parse_refuses_it() -> None:
    turns = [{"role": "user", "content": "q"}] * 2049
    body = {"model": "tiny", "max_tokens": 16, "messages": turns}
    assert outcome(messages_parse.parse, body) == outcome(messages_parse.parse_full, body)
    assert outcome(messages_parse.parse, body)[0] is InvalidRequest  # type: ignore[index]


def test_a_plain_messages_body_skips_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    full: list[object] = []
    parse_full = messages_parse.parse_full
    monkeypatch.setattr(messages_parse, "parse_full", lambda *a: full.append(a) or parse_full(*a))
    body = {"model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": "Say hello"}], "stream": True}
    blocks = [{"role": "assistant", "content": [{"type": "text", "text": "Hi"}]}, {"role": "user", "content": "Go on"}]
    request = messages_parse.parse(
        {**body, "system": "Be brief", "temperature": 1, "messages": body["messages"] + blocks}
    )
    assert (request.sampling.temperature, request.native_dialect, full) == (1.0, "anthropic", [])
    assert [m.content for m in request.messages] == ["Be brief", "Say hello", "Hi", "Go on"]
    messages_parse.parse({**body, "stop_sequences": ["x"]})  # any other field: the full parse
    messages_parse.parse(body, "some-beta-2025-01-01")  # a beta only Anthropic honours: the full parse
    messages_parse.parse({**body, "messages": body["messages"] + blocks[:1]})  # a prefill: the full parse
    assert len(full) == 3

"""A refusal's words are the client's: every dialect's parse, given a wrong value at any node of a rich
valid body, names the field by its path in the body and its type in JSON's words, never one of our
pydantic models (``MessageParam``, ``ChatMessageBody``, ``TextConfig``) nor pydantic's Python words
(``a valid dictionary or instance of``, ``discriminator``, ``Input tag``).

The leak was one class: pydantic's sentence for a model given a non-object names the model's class, and
every dialect's envelope carries the sentence as it is. ``refusals.invalid_from`` chooses the words once,
so every dialect is checked here, each value at each node: no sampling.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pydantic

import gateway.dialects  # every dialect's models, so that their classes are subclasses below
from gateway.core.errors import GatewayError
from tests.support.rich_bodies import paths, replaced
from tests.unit.test_parse_hostile_nodes import CASES

JSON = Any
VALUES: list[JSON] = [
    None,
    True,
    0,
    1.5,
    "",
    "x",
    [],
    {},
    [None],
    [[]],
    ["x"],
    [1],
    {"a": 1},
    {"type": 1},
    {"type": {}},
    -1,
    -2.5,
    2**40,
    "x" * 300,
]
PYTHON_WORDS = ("dictionary", "instance of", "discriminator", "Input tag", "extract fields")
# a value or a list in Python's spelling ("None is not one of ['a', 'b']"), where JSON's is meant
PYTHON_REPR = re.compile(r"\['|\{'|\bNone\b|\bTrue\b|\bFalse\b|is not one of")
# pydantic's stock phrases: a refusal says them in the gateway's words ("'max_tokens' must be an integer")
PYDANTIC_WORDS = ("Input should", "should have", "valid dictionary", "after validation", "instance of", "valid ")


def subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


OURS = sorted(
    {c.__name__ for c in subclasses(pydantic.BaseModel) if c.__module__.startswith(gateway.dialects.__name__)}
)
CLASS_NAME = re.compile(r"\b(?:" + "|".join(OURS) + r")\b")


def refusals() -> Iterator[tuple[str, tuple[str | int, ...], JSON, str]]:
    """(dialect, path, value, message) of every refusal with a value at a node."""
    for dialect, operation, flavour, body in CASES:
        for at in paths(body):
            for value in VALUES:
                try:
                    dialect.parse(operation, replaced(body, at, value), flavour)
                except GatewayError as exc:
                    yield dialect.name, at, value, exc.message


def test_the_models_checked_for_are_every_dialects() -> None:
    assert {"MessageParam", "TextBlock", "ChatMessageBody", "TextConfig", "EmbeddingsBody"} <= set(OURS)


def test_no_refusal_names_a_class_of_ours_or_speaks_python() -> None:
    leaks = []
    for name, at, value, message in refusals():
        if CLASS_NAME.search(message) or any(w in message for w in (*PYTHON_WORDS, *PYDANTIC_WORDS)):
            leaks.append(f"{name} {at} = {value!r}: {message}")
    assert not leaks, f"{len(leaks)} refusals, the first: " + "\n".join(leaks[:10])


def test_a_non_object_where_an_object_goes_is_named_by_its_path() -> None:
    seen = {(name, message) for name, at, value, message in refusals() if at == ("messages", 0) and value == 1.5}
    assert ("anthropic", "'messages[0]' must be an object") in seen
    assert ("openai", "'messages[0]' must be an object") in seen


def test_pydantic_sentences_are_said_in_the_gateways_words() -> None:
    seen = {(name, at, repr(value)): message for name, at, value, message in refusals()}
    assert seen["openai", ("max_tokens",), "'x'"] == "'max_tokens' must be an integer"
    assert seen["openai", ("max_tokens",), "-1"] == "'max_tokens' must be at least 1"
    assert seen["openai", ("messages",), "[]"] == "'messages' must have at least 1 item"
    assert seen["openai", ("model",), "0"] == "'model' must be a string"
    assert (
        seen["anthropic", ("messages", 0, "role"), "'x'"]
        == "'messages[0].role' must be one of 'user', 'assistant', 'system'"
    )


def refusal_of(**fields: JSON) -> str:
    """The refusal of OpenAI chat's plain body with ``fields`` added."""
    dialect, operation, flavour, _ = CASES[0]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    try:
        dialect.parse(operation, body, flavour)
    except GatewayError as exc:
        return exc.message
    raise AssertionError(f"{fields} was taken")


def test_bounds_and_types_are_said_as_json_would() -> None:
    assert refusal_of(temperature=-1) == "'temperature' must be at least 0"
    assert refusal_of(temperature=2.5) == "'temperature' must be at most 2"
    assert refusal_of(temperature="x") == "'temperature' must be a number"
    assert refusal_of(stream=1) == "'stream' must be a boolean"
    assert refusal_of(stop=1) == "'stop' must be a string or an array"
    assert refusal_of(user="x" * 10_000).startswith("'user' must have at most ")


def test_no_refusal_prints_a_python_value() -> None:
    leaks = [
        f"{name} {at} = {value!r}: {message}" for name, at, value, message in refusals() if PYTHON_REPR.search(message)
    ]
    assert not leaks, f"{len(leaks)} refusals, the first: " + "\n".join(leaks[:10])


def test_responses_lists_choices_as_the_other_dialects() -> None:
    seen = {(name, at, repr(value)): message for name, at, value, message in refusals() if name == "responses"}
    assert seen["responses", ("input", 0, "role"), "None"] == "'input[0].role' is required"
    assert seen["responses", ("input", 0, "role"), "'x'"] == (
        "'input[0].role' must be one of 'user', 'system', 'developer', 'assistant'"
    )
    assert seen["responses", ("text", "format", "type"), "[1]"] == (
        "'text.format.type' must be one of 'text', 'json_object', 'json_schema'"
    )
    assert seen["responses", ("input", 1, "content", 0), "1.5"] == "'input[1].content[0]' must be an object"


def test_a_number_json_cannot_hold_is_said_as_the_schemas_are() -> None:
    assert refusal_of(temperature=float("inf")) == "'temperature' must be a finite number"
    assert refusal_of(logit_bias={"1": float("nan")}) == "'logit_bias.1' must be a finite number"

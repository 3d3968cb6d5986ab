"""Every dialect's parse, with a hostile value at any depth of a rich valid body: a client's error
(``GatewayError``, which its dialect renders as a 4xx) or a request, never another exception, which
the gateway answers 500. What parse gives is then estimated for admission and encoded for every
provider that can honour it, which must not raise either.

The ingress fuzzer (``tests/integration/test_ingress_fuzz.py``) lays hostile values over top-level
fields only; here a content part's ``type``, a tool-call output's part, a block inside a tool result
or ``output_config.effort`` is as likely as ``temperature``. That class (a value looked up in a set
before its type was checked, unhashable: TypeError) reached three dialects' parsers and the prompt
estimate.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters import PROVIDERS
from gateway.core.errors import GatewayError
from gateway.core.request import Operation
from gateway.dialects import ANTHROPIC, EMBEDDINGS, FRIENDLI, FRIENDLI_2024, OCTOAI, OPENAI, RESPONSES, SGP_V4, SGP_V5
from gateway.dialects.base import Dialect
from gateway.limits.plan import estimate_prompt
from gateway.routing.capabilities import fit

JSON = Any
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
CHAT = {
    "model": "m",
    "max_tokens": 4,
    "messages": [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:,"}}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ],
    "tools": [TOOL],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "stop": ["x"],
    "logit_bias": {"5": 1},
}
COMPLETION = {"model": "m", "max_tokens": 4, "prompt": ["hi", "there"], "stop": ["x"], "logprobs": 1, "seed": 3}
MESSAGES = {
    "model": "m",
    "max_tokens": 4,
    "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}]}],
        },
    ],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "output_config": {"effort": "low"},
    "metadata": {"user_id": "u"},
}
RESPONSE = {
    "model": "m",
    "max_output_tokens": 4,
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]},
    ],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": "auto",
    "text": {"format": {"type": "json_object"}},
    "reasoning": {"effort": "low"},
}
EMBEDDING = {"model": "e", "input": [[1, 2, 3], [4, 5]], "encoding_format": "float", "dimensions": 8}
EMBEDDERS = ("openai", "vllm")  # the providers an embedding model's targets may name
C, CHAT_OP = Operation.COMPLETION, Operation.CHAT
# (dialect, operation, flavour, the valid body mutated)
CASES: list[tuple[Dialect, Operation, str, dict[str, JSON]]] = [
    (OPENAI, CHAT_OP, "container", CHAT),
    (OPENAI, C, "container", COMPLETION),
    (FRIENDLI, CHAT_OP, "serverless", CHAT),
    (FRIENDLI, C, "dedicated", COMPLETION),
    (FRIENDLI_2024, C, "container", COMPLETION | {"num_beams": None, "timeout_microseconds": None}),
    (SGP_V4, CHAT_OP, "", CHAT),
    (SGP_V5, C, "", COMPLETION),
    (OCTOAI, CHAT_OP, "", CHAT),
    (OCTOAI, C, "", COMPLETION),
    (ANTHROPIC, CHAT_OP, "", MESSAGES),
    (ANTHROPIC, CHAT_OP, "count_tokens", {k: v for k, v in MESSAGES.items() if k not in ("max_tokens", "metadata")}),
    (RESPONSES, CHAT_OP, "", RESPONSE),
    (EMBEDDINGS, Operation.EMBEDDING, "", EMBEDDING),
]

HOSTILE = st.one_of(
    st.sampled_from([None, True, 0, -1, 1.5, 2**64, "", "x", "text", "function", [], {}, [None], [[]], [{}]]),
    st.lists(st.sampled_from(["text", "function", "low", 1, None]), min_size=1, max_size=2),
    st.dictionaries(st.sampled_from(["type", "text", "a"]), st.sampled_from(["text", 1, None]), min_size=1, max_size=2),
)


def paths(node: JSON, at: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every node's path under ``node``: the ones a hostile value may replace."""
    out = [at] if at else []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out += paths(value, (*at, key))
    return out


def replaced(body: dict[str, JSON], at: tuple[str | int, ...], value: JSON) -> dict[str, JSON]:
    out = copy.deepcopy(body)
    node: JSON = out
    for key in at[:-1]:
        node = node[key]
    node[at[-1]] = value
    return out


@st.composite
def hostile_bodies(draw: st.DrawFn) -> tuple[int, dict[str, JSON]]:
    case = draw(st.integers(0, len(CASES) - 1))
    body = CASES[case][3]
    for _ in range(draw(st.integers(1, 2))):
        body = replaced(body, draw(st.sampled_from(paths(body))), draw(HOSTILE))
    return case, body


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_bodies())
def test_a_hostile_value_anywhere_is_a_clients_error_or_a_request(drawn: tuple[int, dict[str, JSON]]) -> None:
    case, body = drawn
    dialect, operation, flavour, _ = CASES[case]
    try:
        request = dialect.parse(operation, body, flavour)
    except GatewayError as exc:
        assert 400 <= exc.status < 500, exc
        return
    estimate_prompt(request)
    for name, wire in PROVIDERS.items():
        if operation is Operation.EMBEDDING and name not in EMBEDDERS:
            continue
        try:
            fitted, _ = fit(request, name, wire.features, ())
            wire.encode(fitted, "up")
        except GatewayError as exc:
            assert 400 <= exc.status < 500, exc


def test_every_case_parses_as_given() -> None:
    """The bodies mutated are valid: a mutation, not the body, is what a refusal answers."""
    for dialect, operation, flavour, body in CASES:
        dialect.parse(operation, body, flavour)

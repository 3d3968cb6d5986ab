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
from tests.support.rich_bodies import CHAT, COMPLETION, EMBEDDING, MESSAGES, RESPONSE, mutations

JSON = Any
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


@st.composite
def hostile_bodies(draw: st.DrawFn) -> tuple[int, dict[str, JSON]]:
    case = draw(st.integers(0, len(CASES) - 1))
    return case, draw(mutations(CASES[case][3]))[1]


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

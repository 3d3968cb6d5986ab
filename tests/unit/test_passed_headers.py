"""No egress wire sends a client's header unless it is deliberately mapped: whatever a request holds,
each wire's headers and body carry of the client's only the pass-through headers (``EXTRA_HEADERS``)
``dialects/headers.py`` lets by, on a wire that declares the feature, and an Anthropic client's
``anthropic-beta`` on Anthropic's wire. Never a client's credentials, another vendor's protocol
headers (``anthropic-version``, ``openai-beta``, ``x-stainless-*``), or a name the gateway sets."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters import NATIVE, PROVIDERS, TRANSLATED
from gateway.core.request import ChatMessage, Feature, InternalRequest, Operation, Sampling
from gateway.dialects.anthropic.egress import AnthropicWire
from gateway.dialects.base import Wire
from gateway.dialects.headers import refused_header
from gateway.dialects.responses.parse import Turn

WIRES: list[Wire] = list(
    {id(w): w for w in [*PROVIDERS.values(), *TRANSLATED.values(), *(w for n in NATIVE.values() for w in n.values())]}
    .values()
)  # fmt: skip
# What hostile clients send, by SDK header, credential, framing, or a name the gateway sets itself
HOSTILE_NAMES = [
    "Authorization", "x-api-key", "api-key", "Proxy-Authorization", "Cookie", "OpenAI-Organization",
    "openai-project", "X-Selected-Account-Id", "X-Friendli-Team", "anthropic-version", "anthropic-beta",
    "Anthropic-Workspace-Id", "OpenAI-Beta", "x-stainless-lang", "X-Stainless-Retry-Count", "x-fern-sdk-name",
    "X-Request-Id", "traceparent", "Host", "Content-Type", "Content-Length", "Transfer-Encoding",
    "Connection", "User-Agent", "Accept", "x-route-hint", "x-tenant", "bad name", "",
]  # fmt: skip
NAMES = st.sampled_from(HOSTILE_NAMES).flatmap(lambda n: st.sampled_from([n, n.lower(), n.upper()]))
SUFFIXES = st.sampled_from(["", "\r\nx-injected: 1", "\n", "\x00"])


def request(headers: dict[str, str], asked: bool, beta: str) -> InternalRequest:
    features = frozenset({Feature.EXTRA_HEADERS}) if asked else frozenset()
    turn = Turn(id="resp_1", created_at=0, echo={}, input_items=[])  # what a Responses wire reads
    return InternalRequest(
        Operation.CHAT,
        "m",
        messages=(ChatMessage("user", "hi"),),
        sampling=Sampling(max_tokens=4),
        extra_headers=headers,
        anthropic_beta=beta,
        features=features,
        native={"model": "m", "input": "hi"},
        reply=turn,
    )


def marked(text: str) -> set[str]:
    """The hostile values (``HOSTILE-<i>``) found in ``text``."""
    return {f"HOSTILE-{i}" for i in range(len(HOSTILE_NAMES) * 3) if f"HOSTILE-{i}:" in text}


@pytest.mark.parametrize("wire", WIRES, ids=[f"{type(w).__name__}-{i}" for i, w in enumerate(WIRES)])
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(NAMES, SUFFIXES), min_size=1, max_size=12), st.booleans())
def test_a_wire_sends_of_a_clients_headers_only_what_is_mapped(
    wire: Wire, drawn: list[tuple[str, str]], asked: bool
) -> None:
    asked = asked and Feature.EXTRA_HEADERS in wire.features  # fitted: asked only of a wire declaring it
    headers = {name: f"HOSTILE-{i}:{suffix}" for i, (name, suffix) in enumerate(drawn)}
    beta = "HOSTILE-beta:"
    req = request(headers, asked, beta)
    passable = {v.split(":")[0] for k, v in headers.items() if refused_header(k, v) is None}
    mapped = passable if asked else set()
    sent = wire.headers("upstream-key", "team", req)
    body = json.dumps(wire.encode(req, "up-model"))
    in_headers = marked("\n".join(sent.values()))
    assert in_headers | marked(body) == mapped  # every pass-through header a wire declares, and no other
    assert all(refused_header(k, v) is None for k, v in sent.items() if "HOSTILE" in v and k != "anthropic-beta")
    anthropic = isinstance(wire, AnthropicWire)
    assert (sent.get("anthropic-beta") == beta) is anthropic and beta not in body
    assert not any("\n" in v or "\r" in v for v in sent.values())


def test_the_reserved_names_are_refused_whatever_their_case() -> None:
    for name in HOSTILE_NAMES:
        allowed = refused_header(name, "v") is None
        assert allowed is (name in ("x-route-hint", "x-tenant")), name
        assert (refused_header(name.upper(), "v") is None) is allowed
    assert refused_header("x-route-hint", "a\r\nb") == "its value holds a control character"

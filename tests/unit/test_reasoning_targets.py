"""Anthropic's thinking and effort on every target kind: advisory features (``capabilities.ADVISORY``),
served without by a target with no reasoning control and none of their fields sent to it; mapped by
the wire of one that has a control (OpenAI's reasoning models: ``reasoning_effort``, vLLM's own
fields); never a refusal. docs/dialects.md, "Thinking and effort on every target"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters import PROVIDERS, TRANSLATED
from gateway.core.errors import InvalidRequest, UnsupportedFeature
from gateway.core.request import Feature, InternalRequest
from gateway.dialects.anthropic.parse import parse
from gateway.dialects.openai.egress import OPENAI_WIRE, VLLM_WIRE
from gateway.dialects.openai.openai_fields import OPENAI_EXTRAS, budget_level, openai_reasoning
from gateway.dialects.openai.parse import parse_chat
from gateway.routing.capabilities import ADVISORY, fit

JSON = Any
F = Feature
# What Claude Code 2.1.197 sends for a model name it does not know (tests/integration/test_claude_code.py
# runs it): adaptive thinking, an effort, thinking clearing that keeps all, its betas; and earlier
# turns' thinking, as it sends a reasoning model's back.
BETAS = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,effort-2025-11-24"
THOUGHT = {"type": "thinking", "thinking": "Two and two.", "signature": ""}
TURNS = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": [THOUGHT, {"type": "text", "text": "4"}]},
    {"role": "user", "content": "And 3+3?"},
]
# The body keys that only a wire with a reasoning control may carry (and Anthropic's own, on none).
REASONING_KEYS = {"thinking", "effort", "output_config", "reasoning_effort", "thinking_token_budget"}


def claude_code(**fields: JSON) -> InternalRequest:
    body = {
        "model": "m",
        "max_tokens": 32000,
        "messages": TURNS,
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "stream": True,
    }
    return parse(body | fields, BETAS)


WIRES = {**PROVIDERS, **{f"{p} (passthrough: false)": w for p, w in TRANSLATED.items()}}


@pytest.mark.parametrize("provider", sorted(WIRES))
@pytest.mark.parametrize("thinking", [{"type": "adaptive"}, {"type": "enabled", "budget_tokens": 2048}])
def test_every_wire_serves_claude_codes_body(provider: str, thinking: JSON) -> None:
    """Fitted to each provider's own features (no ``drop_unsupported``) and encoded: never a refusal;
    a wire without thinking, effort or earlier thoughts gets none of their fields, nor a turn's
    reasoning, and hears the drop named; one with them keeps them."""
    wire = WIRES[provider]
    request = claude_code(thinking=thinking)
    fitted, dropped = fit(request, provider, wire.features, ())
    assert set(dropped) == ADVISORY - wire.features
    body = wire.encode(fitted, "up-model")
    sent = json.dumps(body)
    if F.THOUGHTS not in wire.features:
        assert "Two and two." not in sent, sent
    if not {F.THINKING, F.EFFORT} & wire.features:
        assert not REASONING_KEYS & body.keys(), body


def test_a_dropped_advice_leaves_the_rest_of_the_request_as_it_was() -> None:
    request = claude_code()
    fitted, dropped = fit(request, "openai:gpt-4o", OPENAI_WIRE.features, ())
    assert dropped == sorted(ADVISORY) and not fitted.features & ADVISORY
    assert fitted.chat is None or not fitted.chat.reasoning
    assert [m.reasoning for m in fitted.messages] == [None, None, None]
    assert [m.content for m in fitted.messages] == [m.content for m in request.messages]
    assert fitted.sampling == request.sampling and fitted.stream == request.stream


def test_advice_is_dropped_whatever_drop_unsupported_says_and_nothing_else_is() -> None:
    """``drop_unsupported`` has no say over advisory features; other features keep its rule."""
    fitted, dropped = fit(claude_code(top_k=5), "openai:gpt-4o", OPENAI_WIRE.features, ("top_k",))
    assert F.TOP_K in dropped and fitted.sampling.top_k is None
    with pytest.raises(UnsupportedFeature) as refused:
        fit(claude_code(top_k=5), "openai:gpt-4o", OPENAI_WIRE.features, ())
    assert refused.value.param == "top_k"
    prefill = [{"role": "user", "content": "Say"}, {"role": "assistant", "content": "Hello"}]
    with pytest.raises(UnsupportedFeature):  # a prefill changes what the answer is: refused still
        fit(claude_code(messages=prefill), "openai:gpt-4o", OPENAI_WIRE.features, ())


def test_a_dropped_reasoning_field_of_an_openai_client_is_not_sent_either() -> None:
    """OpenAI's ``reasoning_effort`` dropped by config (``drop_unsupported``) leaves the body: the
    reset strips it from ``chat.reasoning`` as it strips Anthropic's thinking."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "low"}
    request = parse_chat(body)
    sgp = PROVIDERS["sgp"]
    fitted, dropped = fit(request, "sgp:m", sgp.features, ("reasoning_effort",))
    assert dropped == [F.REASONING] and "reasoning_effort" not in sgp.encode(fitted, "m")
    with pytest.raises(UnsupportedFeature):
        fit(request, "sgp:m", sgp.features, ())


@pytest.mark.parametrize(
    ("reasoning", "sent"),
    [
        ({"thinking": {"type": "adaptive"}}, {}),  # the model's default
        ({"thinking": {"type": "adaptive"}, "effort": "low"}, {"reasoning_effort": "low"}),
        ({"effort": "medium"}, {"reasoning_effort": "medium"}),
        ({"effort": "high"}, {"reasoning_effort": "high"}),
        ({"effort": "xhigh"}, {"reasoning_effort": "xhigh"}),
        ({"effort": "max"}, {"reasoning_effort": "xhigh"}),
        ({"thinking": {"type": "enabled", "budget_tokens": 31999}}, {"reasoning_effort": "high"}),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, {"reasoning_effort": "low"}),
        # an effort says how much directly: it wins over a budget
        ({"thinking": {"type": "enabled", "budget_tokens": 31999}, "effort": "low"}, {"reasoning_effort": "low"}),
        ({"reasoning_effort": "minimal"}, {"reasoning_effort": "minimal"}),  # an OpenAI client's own
    ],
)
def test_openai_reasoning(reasoning: JSON, sent: JSON) -> None:
    assert openai_reasoning(reasoning) == sent


@pytest.mark.parametrize(
    ("budget", "level"), [(1024, "low"), (4999, "low"), (5000, "medium"), (9999, "medium"), (10_000, "high")]
)
def test_a_budget_is_a_level_by_its_bucket(budget: int, level: str) -> None:
    assert budget_level(budget) == level


def test_a_reasoning_openai_target_takes_effort_and_its_length_as_max_completion_tokens() -> None:
    """An ``openai`` target whose ``extra_features`` say its model reasons: the effort as
    ``reasoning_effort``; every chat's length bound as ``max_completion_tokens`` (reasoning models
    refuse ``max_tokens``), a completion's as ``max_tokens`` (the legacy path has no other)."""
    fitted, dropped = fit(claude_code(), "openai:o3", OPENAI_WIRE.features | OPENAI_EXTRAS, ())
    body = OPENAI_WIRE.encode(fitted, "o3")
    assert dropped == [F.THOUGHTS] and body["reasoning_effort"] == "high"
    assert body["max_completion_tokens"] == 32000 and "max_tokens" not in body
    assert not {"thinking", "effort", "output_config"} & body.keys()
    plain = OPENAI_WIRE.encode(fit(claude_code(), "openai:gpt-4o", OPENAI_WIRE.features, ())[0], "gpt-4o")
    assert plain["max_completion_tokens"] == 32000 and "reasoning_effort" not in plain


def test_vllm_keeps_its_own_fields() -> None:
    """vLLM serves all three: its chat path's fields as its /v1/messages puts them."""
    request = claude_code(thinking={"type": "enabled", "budget_tokens": 2048})
    fitted, dropped = fit(request, "vllm:m", VLLM_WIRE.features, ())
    body = VLLM_WIRE.encode(fitted, "m")
    assert dropped == [] and body["thinking_token_budget"] == 2048 and body["reasoning_effort"] == "high"
    assert body["messages"][1]["reasoning"] == "Two and two." and body["max_tokens"] == 32000


def test_an_enabled_thinking_needs_its_budget() -> None:
    with pytest.raises(InvalidRequest) as caught:
        claude_code(thinking={"type": "enabled"})
    assert caught.value.param == "thinking.budget_tokens" and "required" in caught.value.message

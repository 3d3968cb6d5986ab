"""OpenAI's own API's fields beyond the body every OpenAI-shaped wire shares, as the ``openai`` wire
(``egress``) writes them: an Anthropic client's thinking and effort as a reasoning model's
``reasoning_effort``, and a chat answer's length bound as ``max_completion_tokens``. Sans-IO; no other
vendor's fields (vLLM's are ``vllm_fields``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.request import Feature

JSON = Any
F = Feature

# What an ``openai`` target may add with ``extra_features``: its model is a reasoning model (o-series,
# gpt-5), which takes ``reasoning_effort``. Without them an Anthropic client's thinking and effort are
# advisory features the target has no control for (``routing/capabilities.ADVISORY``): OpenAI's API
# refuses ``reasoning_effort`` for any other model (400 ``unsupported_parameter``), and only the
# operator knows which kind the target's model is.
OPENAI_EXTRAS = frozenset({F.THINKING, F.EFFORT})
# Anthropic's effort levels as OpenAI's: the same words up to ``high``; Anthropic's ``max`` (thinking
# without a bound) is OpenAI's deepest, ``xhigh``. A level the model lacks (o3 takes low, medium and
# high; xhigh only models after gpt-5.1-codex-max) is its own 400, as for an OpenAI client asking it.
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}
# An enabled thinking's budget as a level: LiteLLM's buckets for the same translation (10k and 5k
# tokens), below them ``low``, which every reasoning model takes (``minimal`` only gpt-5's).
BUDGET_LEVELS = ((10_000, "high"), (5_000, "medium"))
# OpenAI's chat takes the length bound as ``max_completion_tokens``: ``max_tokens`` is deprecated, and
# reasoning models refuse it (400, "Use 'max_completion_tokens' instead").
CHAT_LENGTH = "max_completion_tokens"


def budget_level(budget: int) -> str:
    return next((level for least, level in BUDGET_LEVELS if budget >= least), "low")


def openai_reasoning(reasoning: Mapping[str, JSON]) -> dict[str, JSON]:
    """A chat request's reasoning fields on OpenAI's wire: an OpenAI-shaped client's own as they came;
    an Anthropic client's ``effort`` as its level, else an ``enabled`` thinking's budget as one; an
    ``adaptive`` thinking alone asks nothing (the model's default). Only targets with the features
    (``OPENAI_EXTRAS``) keep ``thinking`` and ``effort`` this far."""
    out = {k: v for k, v in reasoning.items() if k not in ("thinking", "effort")}
    thinking = reasoning.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) and thinking.get("type") == "enabled" else None
    if "effort" in reasoning:
        out["reasoning_effort"] = EFFORTS[reasoning["effort"]]
    elif isinstance(budget, int):
        out["reasoning_effort"] = budget_level(budget)
    return out

"""Matching a request's features against a target's: refuse by name, or drop where config allows.

A dropped feature is stripped from the request the target sees (its fields reset to "not asked"), and
the drop is reported to the caller so it can be counted and logged. Nothing is ever ignored silently.
Advisory features (how much to reason, never what the answer says) are dropped so by every target
without them, whatever its config: docs/dialects.md, "Thinking and effort on every target".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

from gateway.core.errors import UnsupportedFeature
from gateway.core.request import Feature, InternalRequest
from gateway.runtime.config import ConfigError

F = Feature
# Sampling fields reset when a feature is dropped.
SAMPLING_RESETS: dict[Feature, dict[str, Any]] = {
    F.N: {"n": 1},
    F.BEST_OF: {"best_of": None},
    F.TOP_K: {"top_k": None},
    F.MIN_P: {"min_p": None},
    F.XTC: {"xtc_threshold": None, "xtc_probability": None},
    F.REPETITION_PENALTY: {"repetition_penalty": None},
    F.NO_REPEAT_NGRAM: {"no_repeat_ngram": None},
    F.ENCODER_PENALTIES: {"encoder_repetition_penalty": None, "encoder_no_repeat_ngram": None},
    F.MIN_TOKENS: {"min_tokens": None},
    F.MAX_TOTAL_TOKENS: {"max_total_tokens": None},
    F.MIN_TOTAL_TOKENS: {"min_total_tokens": None},
    F.STOP: {"stop": ()},
    F.STOP_TOKEN_IDS: {"eos_token_ids": ()},
    F.STOP_TOKEN_SEQUENCES: {"stop_token_sequences": ()},
    F.INCLUDE_STOP_STR: {"include_stop_str_in_output": False},
    F.IGNORE_EOS: {"ignore_eos": False},
    F.BAD_WORDS: {"bad_words": ()},
    F.BAD_WORD_TOKENS: {"bad_word_tokens": ()},
    F.LOGIT_BIAS: {"logit_bias": None},
    F.LOGPROBS: {"logprobs": None},
    F.PROMPT_LOGPROBS: {"prompt_logprobs": None},
    F.ECHO: {"echo": False},
    F.SUFFIX: {"suffix": None},
    F.SEED: {"seeds": None},
    F.FORCED_OUTPUT: {"forced_output_tokens": ()},
    F.JSON_OBJECT: {"structured": None},
    F.JSON_SCHEMA: {"structured": None},
    F.REGEX: {"structured": None},
    F.CHOICE: {"structured": None},
    F.GRAMMAR: {"structured": None},
    F.BEAM_SEARCH: {"beam": None},
    F.OUTPUT_LOGITS: {"output_logits": False},
}
REQUEST_RESETS: dict[Feature, dict[str, Any]] = {
    F.ADAPTER: {"adapter": None},
    F.EMBEDDING_REPLACEMENT: {"embedding_replacement": None},
    F.EXTRA_BODY: {"extra_body": None},
    F.EXTRA_HEADERS: {"extra_headers": None},
}
# Features that change what the answer means: never dropped, whatever the config says.
NEVER_DROPPED = frozenset({F.BATCH_PROMPT, F.TOKEN_PROMPT, F.SEED_PER_CHOICE, F.TOOLS, F.AUDIO, F.PREDICTION})
# Features that say how much the model may reason, never what it answers: dropped, whatever the config
# says, by a target with no reasoning control. Anthropic's API itself leaves thinking to the model
# (adaptive thinking may skip it, a budget is a ceiling, effort a soft guide) and strips earlier
# turns' thinking from the context of most models: an answer without thinking is a valid answer.
ADVISORY = frozenset({F.THINKING, F.EFFORT, F.THOUGHTS})
# The keys of ``ChatOptions.reasoning`` each feature travels under (the Anthropic parse writes the
# first two; an OpenAI-shaped client's own reasoning fields are every other key).
REASONING_KEYS: dict[Feature, str] = {F.THINKING: "thinking", F.EFFORT: "effort"}


def check_extra_features(names: Sequence[str], extras: frozenset[Feature], provider: str) -> None:
    """A target's ``extra_features`` name only what its provider's upstream may serve beyond its set (a
    plugin vLLM loads, a reasoning model's control): any other name would be forwarded and ignored
    upstream, or be no feature at all. The error's text extends the target's key path
    (``.extra_features[i]: ...``)."""
    for i, name in enumerate(names):
        if name not in extras:
            takes = ", ".join(sorted(extras)) or "nothing"
            raise ConfigError(
                f".extra_features[{i}]: {name!r} is not an extra feature of provider {provider!r} (it takes: {takes})"
            )


def fit(
    request: InternalRequest, target: str, supported: frozenset[Feature], droppable: Collection[str]
) -> tuple[InternalRequest, list[Feature]]:
    """The request as ``target`` will see it, and the features dropped on the way."""
    missing = request.features - supported
    if not missing:
        return request, []
    dropped: list[Feature] = []
    sampling_changes: dict[str, Any] = {}
    request_changes: dict[str, Any] = {}
    for feature in sorted(missing):
        name = request.field_name(feature)
        allowed = feature.value in droppable or name in droppable
        if feature not in ADVISORY and (feature in NEVER_DROPPED or not allowed):
            raise UnsupportedFeature(name, target, request.field_reason(feature))
        if feature in SAMPLING_RESETS:
            sampling_changes |= SAMPLING_RESETS[feature]
        request_changes |= REQUEST_RESETS.get(feature, {})
        dropped.append(feature)
    sampling = dataclasses.replace(request.sampling, **sampling_changes)
    features = request.features - frozenset(dropped)
    request_changes |= chat_resets(request, frozenset(dropped))
    return dataclasses.replace(request, sampling=sampling, features=features, **request_changes), dropped


def chat_resets(request: InternalRequest, dropped: frozenset[Feature]) -> dict[str, Any]:
    """The chat fields of dropped reasoning features reset: their keys out of ``chat.reasoning``, and
    earlier turns' thinking out of the messages."""
    changes: dict[str, Any] = {}
    chat = request.chat
    if chat is not None and chat.reasoning:
        kept = {k: v for k, v in chat.reasoning.items() if _reasoning_key_feature(k) not in dropped}
        if len(kept) != len(chat.reasoning):
            changes["chat"] = dataclasses.replace(chat, reasoning=kept or None)
    if F.THOUGHTS in dropped:
        changes["messages"] = tuple(
            dataclasses.replace(m, reasoning=None) if m.reasoning is not None else m for m in request.messages
        )
    return changes


def _reasoning_key_feature(key: str) -> Feature:
    """The feature a ``chat.reasoning`` key belongs to: an advisory one's, else the client's own
    reasoning fields (``REASONING``: reasoning_effort, chat_template_kwargs ...)."""
    return next((f for f, k in REASONING_KEYS.items() if k == key), F.REASONING)

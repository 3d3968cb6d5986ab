"""vLLM's extensions of OpenAI's body, as the ``vllm`` wire (``egress``) and the in-process engine use
them: the features vLLM serves and those this project's plugins add (``extra_features``), the plugins'
``vllm_xargs``, when to ask for output token ids, vLLM's own checks made before sending (so a client
gets its dialect's 400 naming its field), an Anthropic client's thinking and effort as vLLM's chat
takes them, vLLM's prompt logprobs read back, and the end token the ``stop_token_sequences`` plugin
forces taken back out of answers. Sans-IO; no wire format beyond these fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gateway.core.errors import InvalidRequest
from gateway.core.request import Feature, InternalRequest, Operation, Sampling
from gateway.core.response import Completion, TokenLogprob
from gateway.dialects.openai.schema import STREAM_FORMAT

JSON = Any
F = Feature

VLLM_FEATURES = frozenset(
    {F.BATCH_PROMPT, F.TOKEN_PROMPT, F.N, F.STOP, F.LOGIT_BIAS, F.LOGPROBS, F.ECHO, F.SEED, F.TOOLS, F.REASONING}
    | {F.TOP_K, F.MIN_P, F.REPETITION_PENALTY, F.MIN_TOKENS, F.STOP_TOKEN_IDS, F.INCLUDE_STOP_STR, F.IGNORE_EOS}
    | {F.BAD_WORDS, F.JSON_OBJECT, F.JSON_SCHEMA, F.REGEX, F.CHOICE, F.GRAMMAR, F.TOKEN_IDS}
    | {F.PROMPT_LOGPROBS, F.BEAM_SEARCH, F.PREFILL, F.THOUGHTS, F.CHILD_SEEDS}
    # Anthropic's thinking and effort, as vLLM's own /v1/messages puts them on its chat request
    # (``anthropic_reasoning``)
    | {F.THINKING, F.EFFORT}
)
# Served by this project's logits processors (backends/vllm_plugins) when the replica loads them;
# a target opts in with ``extra_features``, and may name nothing else there.
VLLM_PLUGIN_FEATURES = frozenset(
    {F.NO_REPEAT_NGRAM, F.XTC, F.FORCED_OUTPUT, F.MIN_TOTAL_TOKENS, F.MAX_TOTAL_TOKENS}
    | {F.BAD_WORD_TOKENS, F.STOP_TOKEN_SEQUENCES}
)
# What vLLM's beam search takes besides the search itself (entrypoints/generate/beam_search, 0.32):
# each step is a one-token generation with only logprobs and temperature set, so any sampler, stop,
# constraint or plugin would be ignored there. A seed changes nothing in a deterministic search.
BEAM_COMPATIBLE = frozenset({F.BEAM_SEARCH, F.TOKEN_PROMPT, F.SEED, F.IGNORE_EOS, F.INCLUDE_STOP_STR, F.TOKEN_IDS})


def flat(sequences: Sequence[Sequence[int]]) -> list[int]:
    """Token sequences as one list, separated by -1: ``vllm_xargs`` values may be flat lists only."""
    out: list[int] = []
    for seq in sequences:
        out += [*([-1] if out else []), *seq]
    return out


def vllm_xargs(s: Sampling) -> dict[str, JSON]:
    """Friendli samplers served by this project's vLLM logits processors (backends/vllm_plugins)."""
    xargs: dict[str, JSON] = {}
    if s.no_repeat_ngram is not None and s.no_repeat_ngram > 1:
        xargs["no_repeat_ngram_size"] = s.no_repeat_ngram
    if s.xtc_probability and s.xtc_threshold:  # Friendli: either at 0.0 means XTC is off
        xargs["xtc_threshold"] = s.xtc_threshold
        xargs["xtc_probability"] = s.xtc_probability
    if s.forced_output_tokens:
        xargs["forced_output_tokens"] = list(s.forced_output_tokens)
    for key in ("min_total_tokens", "max_total_tokens"):  # Friendli's names are the plugin's
        if (value := getattr(s, key)) is not None:
            xargs[key] = value
    if s.bad_word_tokens:
        xargs["bad_word_tokens"] = flat(s.bad_word_tokens)
    if longer := long_stops(s):  # one token: stop_token_ids
        xargs["stop_token_sequences"] = flat(longer)
    return xargs


def long_stops(s: Sampling) -> tuple[tuple[int, ...], ...]:
    """The stop sequences of more than one token: the plugin's (single tokens are vLLM's own)."""
    return tuple(seq for seq in s.stop_token_sequences if len(seq) > 1)


# The plugin (backends/vllm_plugins/stop_sequences.py) cannot stop generation itself: once the output
# ends with a sequence it leaves only the end token to sample, and vLLM counts that token, in the ids
# and the usage. Friendli ends the answer with the sequence, as a one-token stop does (vLLM's
# ``stop_token_ids`` keep the stop token and add nothing after it), so the forced token is taken out:
# an answer that stopped with a sequence and one token after it ends with the sequence.
def forced_end(ids: Sequence[int], stops: tuple[tuple[int, ...], ...]) -> bool:
    """``ids`` (a choice's output so far, its last token included) are a stop sequence and one token."""
    n = len(ids) - 1
    return any(n >= len(seq) and tuple(ids[n - len(seq) : n]) == seq for seq in stops)


def trim_forced_ends(completion: Completion, stops: tuple[tuple[int, ...], ...]) -> Completion:
    """A whole answer without the end tokens forced after its choices' stop sequences, its usage less them."""
    trimmed = 0
    for c in completion.choices:
        if c.finish_reason == "stop" and c.token_ids and forced_end(c.token_ids, stops):
            c.token_ids = c.token_ids[:-1]
            if c.logprobs is not None and len(c.logprobs) == len(c.token_ids) + 1:
                c.logprobs = c.logprobs[:-1]
            trimmed += 1
    if trimmed and completion.usage is not None:
        completion.usage = replace(
            completion.usage, completion_tokens=max(0, completion.usage.completion_tokens - trimmed)
        )
    return completion


def asks_token_ids(req: InternalRequest, token_ids: bool) -> bool:
    """Whether the upstream's body asks for output token ids (``token_ids``: it can return them). A
    client's own ``return_token_ids`` (in its extra body, merged last) has the last word."""
    if req.extra_body and "return_token_ids" in req.extra_body:
        return bool(req.extra_body["return_token_ids"])
    # Only vLLM returns token ids (OpenAI refuses the field). vLLM answers an echo with an empty prompt
    # text when they are asked for (it returns the prompt's ids instead), so they are asked for with
    # echo only when the client's dialect needs them; nor for a relayed stream of a dialect that shows
    # none, whose chunks the client gets as they are.
    # A multi-token stop needs them: the end token its plugin forces is found by them (``forced_end``).
    return token_ids and (
        req.want_token_ids
        or req.resumable
        or bool(long_stops(req.sampling))
        or (not req.sampling.echo and req.relay != STREAM_FORMAT)
    )


def vllm_ranges(request: InternalRequest) -> None:
    """vLLM's own construction-time checks (vllm.md §1), made here so the client gets its dialect's
    400 naming its field instead of a relayed vLLM message."""
    s = request.sampling
    if s.temperature is not None and s.temperature > 2:
        raise InvalidRequest("'temperature' must be within [0, 2] for this model", param="temperature")
    if s.n > 1 and s.temperature is not None and s.temperature < 1e-5:
        raise InvalidRequest("'n' must be 1 when 'temperature' is 0 (greedy sampling)", param="n")
    if s.min_tokens is not None and s.max_tokens is not None and s.min_tokens > s.max_tokens:
        raise InvalidRequest("'min_tokens' exceeds 'max_tokens'", param="min_tokens")
    if s.prompt_logprobs is not None and (s.echo or (request.stream and request.operation is Operation.CHAT)):
        name = request.field_name(F.PROMPT_LOGPROBS)
        why = (
            "'echo' returns the prompt's logprobs too: ask for one of them"
            if s.echo
            else "vLLM streams prompt logprobs for completions only (its server refuses them on chat streams)"
        )
        raise InvalidRequest(f"'{name}' is not available here: {why}", param=name)
    if s.beam is not None:
        beam_ranges(request)


def beam_ranges(request: InternalRequest) -> None:
    """Friendli 2024 beam search as vLLM's beam search can run it; each value it cannot express is
    refused by name with the reason (docs/dialects.md, "Beam search on vLLM"), never approximated."""
    beam, s = request.sampling.beam, request.sampling
    assert beam is not None
    if beam.early_stopping:
        raise InvalidRequest(
            "'early_stopping' true is not available on vLLM: its beam search runs until max_tokens or until "
            "every beam has ended, and cannot stop once num_beams beams are finished",
            param="early_stopping",
        )
    if beam.search_type not in (None, "DETERMINISTIC"):
        raise InvalidRequest(
            f"'beam_search_type' {beam.search_type} is not available on vLLM: its beam search is the "
            "deterministic one only (DETERMINISTIC)",
            param="beam_search_type",
        )
    for name, on in (
        ("beam_compat_pre_normalization", beam.compat_pre_normalization),
        ("beam_compat_no_post_normalization", beam.compat_no_post_normalization),
    ):
        if on:
            raise InvalidRequest(
                f"'{name}' is not available on vLLM: its beam search scores a beam one way only "
                "(cumulative logprob / length ** length_penalty)",
                param=name,
            )
    plain = [n for n in ("presence_penalty", "frequency_penalty") if getattr(s, n) not in (None, 0)]
    others = sorted(request.field_name(f) for f in request.features - BEAM_COMPATIBLE) + plain
    if others:
        raise InvalidRequest(
            f"'{others[0]}' cannot be combined with beam search on vLLM: its beam search steps take no "
            "samplers, penalties, stops, constraints or plugins",
            param=others[0],
        )


def prompt_logprobs_from(data: JSON, prompt_ids: JSON) -> list[TokenLogprob]:
    """vLLM's ``prompt_logprobs`` (a map of token id → logprob per prompt position; null for the first
    token, which nothing precedes) → the prompt tokens' own logprobs, the first excluded."""
    out = []
    for i, step in enumerate(data or ()):
        if not step:
            continue
        own = str(prompt_ids[i]) if isinstance(prompt_ids, list) and i < len(prompt_ids) else None
        entry = step.get(own) if own is not None else None
        if entry is None:  # no ids to look up: with prompt_logprobs 0 the token's own is the only entry
            entry = next(iter(step.values()))
        out.append(TokenLogprob(str(entry.get("decoded_token") or ""), float(entry["logprob"])))
    return out


def anthropic_reasoning(reasoning: Mapping[str, JSON]) -> dict[str, JSON]:
    """A chat request's reasoning fields, an Anthropic client's ``thinking`` and ``effort`` put as
    vLLM's own /v1/messages puts them on its chat request (entrypoints/anthropic/serving.py, 0.32):
    ``enabled`` its budget as ``thinking_token_budget``, ``adaptive`` nothing (the model chooses),
    the effort as ``reasoning_effort``. Only wires with those features are given them."""
    out = {k: v for k, v in reasoning.items() if k not in ("thinking", "effort")}
    thinking = reasoning.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        out["thinking_token_budget"] = thinking.get("budget_tokens")
    if "effort" in reasoning:
        out["reasoning_effort"] = reasoning["effort"]
    return out

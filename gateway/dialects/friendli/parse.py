"""FriendliAI bodies → the internal request, with the cross-field rules of Friendli's own docs
(seed 000 and 002): ``max_tokens`` xor ``max_total_tokens``, ``min_tokens`` xor ``min_total_tokens``,
no ``min_tokens`` with ``response_format``, the beam-search exclusions of 2024, seed lists per choice.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.core.errors import InvalidRequest
from gateway.core.request import (
    BeamSearch,
    EmbeddingReplacement,
    Feature,
    InternalRequest,
    Operation,
    PromptItem,
    Sampling,
    StructuredOutput,
    drawn_seed,
)
from gateway.dialects.common import FeatureSet, choice_cap, exclusive, request_of, stop_list, validate, without
from gateway.dialects.friendli.schema import (
    FriendliChatBody,
    FriendliCompletionBody,
    FriendliResponseFormat,
)
from gateway.dialects.openai import parse as oai
from gateway.dialects.openai.schema import STREAM_FORMAT

JSON = Any


def model_and_adapter(model: str | None, flavour: str) -> tuple[str, str | None]:
    if not model:
        raise InvalidRequest("'model' is required", param="model")
    if flavour == "dedicated" and ":" in model:
        # dedicated endpoints address a LoRA adapter as ENDPOINT_ID:ADAPTER_ROUTE (dialects.md §2.2)
        endpoint, _, adapter = model.partition(":")
        if not endpoint or not adapter:
            raise InvalidRequest(f"'model' {model!r} is not ENDPOINT_ID:ADAPTER_ROUTE", param="model")
        return endpoint, adapter
    return model, None


def structured(rf: FriendliResponseFormat | None, fs: FeatureSet) -> StructuredOutput | None:
    if rf is None or rf.type == "text":
        return None
    if rf.type == "regex":
        if not isinstance(rf.schema_, str) or not rf.schema_:
            raise InvalidRequest("'response_format.schema' must be the regex pattern", param="response_format.schema")
        fs.use(Feature.REGEX, "response_format")
        return StructuredOutput("regex", rf.schema_)
    if rf.type == "json_schema":
        if rf.json_schema is None:
            raise InvalidRequest("'response_format.json_schema' is required", param="response_format.json_schema")
        fs.use(Feature.JSON_SCHEMA, "response_format")
        return StructuredOutput("json_schema", rf.json_schema.schema_)
    if rf.schema_ is None:
        fs.use(Feature.JSON_OBJECT, "response_format")
        return StructuredOutput("json_object")
    # 2024 generation: json_object with a JSON schema serialized as a string
    schema = rf.schema_
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            raise InvalidRequest(
                "'response_format.schema' is not a valid JSON schema string", param="response_format.schema"
            ) from None
    if not isinstance(schema, dict):
        raise InvalidRequest("'response_format.schema' must describe a JSON object", param="response_format.schema")
    fs.use(Feature.JSON_SCHEMA, "response_format")
    return StructuredOutput("json_schema", schema)


def seeds(seed: int | list[int] | None, n: int | None, fs: FeatureSet) -> tuple[tuple[int, ...] | None, int]:
    if seed is None:
        return None, n or 1
    if isinstance(seed, int):
        fs.use(Feature.SEED, "seed")
        return (seed,), n or 1
    if not seed:
        raise InvalidRequest("'seed' must not be an empty list", param="seed")
    if n is not None and len(seed) != n:
        raise InvalidRequest(f"'seed' has {len(seed)} values but 'n' is {n}", param="seed")
    fs.use(Feature.SEED, "seed")
    fs.use(Feature.SEED_PER_CHOICE, "seed", len(seed) > 1)
    return tuple(seed), len(seed)


def beam(b: FriendliCompletionBody, fs: FeatureSet) -> BeamSearch | None:
    if b.num_beams is None or b.num_beams == 1:
        for name in ("length_penalty", "early_stopping"):
            if getattr(b, name) is not None:
                raise InvalidRequest(f"'{name}' is only allowed with 'num_beams'", param=name)
        return None
    for name, bad in (("stream", b.stream), ("n", b.n not in (None, 1)), ("stop", b.stop)):
        if bad:
            raise InvalidRequest(f"'{name}' is not supported with beam search ('num_beams')", param=name)
    if (b.beam_search_type or "DETERMINISTIC") == "DETERMINISTIC":
        for name in ("top_k", "top_p"):
            if getattr(b, name) is not None:
                raise InvalidRequest(f"'{name}' is not allowed with beam_search_type DETERMINISTIC", param=name)
    fs.use(Feature.BEAM_SEARCH, "num_beams")
    return BeamSearch(
        b.num_beams,
        b.length_penalty,
        b.early_stopping,
        b.beam_search_type,
        b.beam_compat_pre_normalization,
        b.beam_compat_no_post_normalization,
    )


def _prompts(b: FriendliCompletionBody, fs: FeatureSet) -> tuple[PromptItem, ...]:
    exclusive(b, "prompt", "tokens")
    if b.tokens is not None:
        if not b.tokens:
            raise InvalidRequest("'tokens' must not be empty", param="tokens")
        fs.use(Feature.TOKEN_PROMPT, "tokens")
        return (tuple(b.tokens),)
    if b.prompt is None:
        raise InvalidRequest("one of 'prompt' or 'tokens' is required", param="prompt")
    return oai.prompts(b.prompt, fs)


def _embedding(b: FriendliCompletionBody, fs: FeatureSet) -> EmbeddingReplacement | None:
    if b.token_index_to_replace is None and b.embedding_to_replace is None:
        return None
    if not b.token_index_to_replace or not b.embedding_to_replace:
        raise InvalidRequest(
            "'token_index_to_replace' and 'embedding_to_replace' must be given together",
            param="embedding_to_replace",
        )
    if len(b.embedding_to_replace) % len(b.token_index_to_replace):
        raise InvalidRequest(
            "'embedding_to_replace' length must be a multiple of len('token_index_to_replace')",
            param="embedding_to_replace",
        )
    fs.use(Feature.EMBEDDING_REPLACEMENT, "embedding_to_replace")
    return EmbeddingReplacement(tuple(b.token_index_to_replace), tuple(b.embedding_to_replace))


def _samplers(b: FriendliCompletionBody | FriendliChatBody, fs: FeatureSet) -> dict[str, Any]:
    fs.use(Feature.TOP_K, "top_k", b.top_k not in (None, 0))
    fs.use(Feature.MIN_P, "min_p", b.min_p not in (None, 0))
    xtc_on = bool(b.xtc_probability) and bool(b.xtc_threshold)  # 0.0 in either means off
    fs.use(Feature.XTC, "xtc_probability", xtc_on)
    fs.use(Feature.REPETITION_PENALTY, "repetition_penalty", b.repetition_penalty not in (None, 1))
    fs.use(Feature.MIN_TOKENS, "min_tokens", b.min_tokens not in (None, 0))
    fs.use(Feature.STOP_TOKEN_IDS, "eos_token", b.eos_token)
    return {
        "top_k": b.top_k or None,
        "min_p": b.min_p or None,
        "xtc_threshold": b.xtc_threshold if xtc_on else None,
        "xtc_probability": b.xtc_probability if xtc_on else None,
        "repetition_penalty": b.repetition_penalty,
        "min_tokens": b.min_tokens or None,
        "eos_token_ids": tuple(b.eos_token or ()),
        "presence_penalty": b.presence_penalty,
        "frequency_penalty": b.frequency_penalty,
        "temperature": b.temperature,
        "top_p": b.top_p,
    }


TOKEN_LIST_FIELDS = frozenset({"stop_tokens", "bad_word_tokens", "bad_words", "forced_output_tokens", "stop"})
NO_TOKEN_LISTS: dict[str, Any] = {
    "stop": (),
    "stop_token_sequences": (),
    "bad_words": (),
    "bad_word_tokens": (),
    "forced_output_tokens": (),
}
LENGTH_FIELDS = frozenset(
    {"max_total_tokens", "min_total_tokens", "min_tokens", "no_repeat_ngram", "encoder_repetition_penalty"}
    | {"encoder_no_repeat_ngram"}
)
NO_LENGTHS: dict[str, Any] = dict.fromkeys(
    ["max_total_tokens", "min_total_tokens", "no_repeat_ngram", "encoder_repetition_penalty", "encoder_no_repeat_ngram"]
)


def _token_lists(b: FriendliCompletionBody, fs: FeatureSet) -> dict[str, Any]:
    if TOKEN_LIST_FIELDS.isdisjoint(b.model_fields_set):  # most bodies: the shared answer, merged not changed
        return NO_TOKEN_LISTS
    stop_seqs = tuple(tuple(s.tokens) for s in b.stop_tokens or ())
    bad_seqs = tuple(tuple(s.tokens) for s in b.bad_word_tokens or ())
    fs.use(Feature.STOP_TOKEN_IDS, "stop_tokens", stop_seqs and all(len(s) == 1 for s in stop_seqs))
    fs.use(Feature.STOP_TOKEN_SEQUENCES, "stop_tokens", any(len(s) > 1 for s in stop_seqs))
    fs.use(Feature.BAD_WORDS, "bad_words", b.bad_words)
    fs.use(Feature.BAD_WORD_TOKENS, "bad_word_tokens", bad_seqs)
    fs.use(Feature.FORCED_OUTPUT, "forced_output_tokens", b.forced_output_tokens)
    fs.use(Feature.STOP, "stop", b.stop)
    return {
        "stop": stop_list(b.stop, cap=None),
        "stop_token_sequences": stop_seqs,
        "bad_words": tuple(b.bad_words or ()),
        "bad_word_tokens": bad_seqs,
        "forced_output_tokens": tuple(b.forced_output_tokens or ()),
    }


def _lengths(b: FriendliCompletionBody, fs: FeatureSet, so: StructuredOutput | None) -> dict[str, Any]:
    if LENGTH_FIELDS.isdisjoint(b.model_fields_set):  # only max_tokens, if anything: nothing to cross-check
        return {"max_tokens": b.max_tokens} | NO_LENGTHS
    exclusive(b, "max_tokens", "max_total_tokens")
    exclusive(b, "min_tokens", "min_total_tokens")
    if so is not None and b.min_tokens:
        raise InvalidRequest("'min_tokens' is unsupported when 'response_format' is specified", param="min_tokens")
    if b.max_total_tokens is not None and b.min_total_tokens is not None and b.min_total_tokens > b.max_total_tokens:
        raise InvalidRequest("'min_total_tokens' exceeds 'max_total_tokens'", param="min_total_tokens")
    if b.max_tokens is not None and b.min_tokens and b.min_tokens > b.max_tokens:
        raise InvalidRequest("'min_tokens' exceeds 'max_tokens'", param="min_tokens")
    fs.use(Feature.MAX_TOTAL_TOKENS, "max_total_tokens", b.max_total_tokens is not None)
    fs.use(Feature.MIN_TOTAL_TOKENS, "min_total_tokens", b.min_total_tokens not in (None, 0))
    fs.use(Feature.NO_REPEAT_NGRAM, "no_repeat_ngram", b.no_repeat_ngram not in (None, 1))
    fs.use(Feature.ENCODER_PENALTIES, "encoder_repetition_penalty", b.encoder_repetition_penalty not in (None, 1))
    fs.use(Feature.ENCODER_PENALTIES, "encoder_no_repeat_ngram", b.encoder_no_repeat_ngram not in (None, 1))
    return {
        "max_tokens": b.max_tokens,
        "max_total_tokens": b.max_total_tokens,
        "min_total_tokens": b.min_total_tokens or None,
        "no_repeat_ngram": b.no_repeat_ngram if b.no_repeat_ngram != 1 else None,
        "encoder_repetition_penalty": b.encoder_repetition_penalty,
        "encoder_no_repeat_ngram": b.encoder_no_repeat_ngram if b.encoder_no_repeat_ngram != 1 else None,
    }


def _grpc_only(b: FriendliCompletionBody) -> None:
    for name in ("soft_prompts", "position_ids", "generation_offset"):
        if getattr(b, name) is not None:
            raise InvalidRequest(f"'{name}' is only available over Friendli's gRPC API", param=name)


def parse_completion(data: dict[str, JSON], flavour: str, legacy: bool = False) -> InternalRequest:
    """``legacy``: friendli-client's 2024 stream (its last line, the whole answer, reports seeds)."""
    b = validate(FriendliCompletionBody, data)
    relay = None if legacy else STREAM_FORMAT
    # Answers report the seed used per choice, and so does the 2024 stream; today's stream chunks do
    # not (dialects.md §2.7): a stream that will not report one is not given a seed of ours.
    reported = legacy or not b.stream
    if oai.is_plain(b) and model_and_adapter(b.model, flavour)[1] is None:
        stream_usage = oai.stream_usage(bool(b.stream), b.stream_options)
        seed = drawn_seed() if reported else None
        return oai.plain_completion(
            b, b.max_tokens, stream_usage, relay, seed, want_token_ids=True, want_seed=reported, seed_drawn=reported
        )
    _grpc_only(b)
    fs = FeatureSet()
    model, adapter = model_and_adapter(b.model, flavour)
    fs.use(Feature.ADAPTER, "model", adapter)
    items = _prompts(b, fs)
    so = structured(b.response_format, fs)
    seed_values, n = seeds(b.seed, b.n, fs)
    choice_cap(len(items), n, None, "seed" if seed_values is not None and len(seed_values) > 1 else "n")
    seed_drawn = seed_values is None and reported  # the seed to report, when the client gave none
    fs.use(Feature.N, "n", n > 1)
    logprobs = b.logprobs if b.logprobs is not None else (0 if b.include_output_logprobs else None)
    fs.use(Feature.LOGPROBS, "logprobs" if b.logprobs is not None else "include_output_logprobs", logprobs is not None)
    fs.use(Feature.OUTPUT_LOGITS, "include_output_logits", b.include_output_logits)
    sampling = Sampling(
        **_samplers(b, fs),
        **_token_lists(b, fs),
        **_lengths(b, fs, so),
        n=n,
        seeds=drawn_seed() if seed_drawn else seed_values,
        logprobs=logprobs,
        structured=so,
        beam=beam(b, fs),
        output_logits=bool(b.include_output_logits),
    )
    stream = bool(b.stream)
    return request_of(
        fs,
        Operation.COMPLETION,
        model,
        prompts=items,
        sampling=sampling,
        stream=stream,
        stream_usage=oai.stream_usage(stream, b.stream_options),
        adapter=adapter,
        embedding_replacement=_embedding(b, fs),
        timeout=b.timeout_microseconds / 1e6 if b.timeout_microseconds else None,
        want_token_ids=True,
        want_seed=reported,
        seed_drawn=seed_drawn,
        relay=oai.relay_for(stream, logprobs, relay),
    )


def parse_chat(data: dict[str, JSON], flavour: str) -> InternalRequest:
    b = validate(FriendliChatBody, data)
    fs = FeatureSet()
    model, adapter = model_and_adapter(b.model, flavour)
    fs.use(Feature.ADAPTER, "model", adapter)
    kw = oai.chat_sampling(without(b, "response_format"), fs) | _samplers(b, fs)
    kw["structured"] = structured(b.response_format, fs)
    if kw["structured"] is not None and b.tools:
        # Friendli refuses this pair with 422 (dialects.md §2.5)
        raise InvalidRequest("'response_format' cannot be combined with 'tools'", param="response_format")
    reasoning = {
        "parse_reasoning": b.parse_reasoning,
        "include_reasoning": b.include_reasoning,
        "reasoning_budget": b.reasoning_budget,
        "chat_template_kwargs": b.chat_template_kwargs,
    }
    stream = bool(b.stream)
    return request_of(
        fs,
        Operation.CHAT,
        model,
        messages=oai.messages(b),
        sampling=Sampling(**kw),
        chat=oai.chat_options(b, fs, reasoning),
        stream=stream,
        stream_usage=oai.stream_usage(stream, b.stream_options),
        adapter=adapter,
        timeout=b.timeout_microseconds / 1e6 if b.timeout_microseconds else None,
        user=b.user,
        want_token_ids=True,  # stream chunks carry the sampled "token", answers "tokens", from vLLM
        relay=oai.relay_for(stream, kw["logprobs"], STREAM_FORMAT),
    )

"""OctoAI bodies → the internal request: ``max_tokens`` defaults to 512, not OpenAI's 16; ``peft``
selects an adapter; ``best_of`` may equal ``n``; ``log_prompt`` is refused (no prompt is ever stored).
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import InvalidRequest
from gateway.core.request import Feature, InternalRequest, Operation, Sampling, StructuredOutput
from gateway.dialects.common import FeatureSet, choice_cap, request_of, validate, without
from gateway.dialects.octoai.schema import OctoChatBody, OctoExtras
from gateway.dialects.openai import parse as oai
from gateway.dialects.openai.schema import STREAM_FORMAT

JSON = Any
DEFAULT_MAX_TOKENS = 512  # seed 003


def _common(b: OctoExtras | OctoChatBody, fs: FeatureSet) -> dict[str, Any]:
    if b.log_prompt:
        raise InvalidRequest("'log_prompt' is not offered: this gateway never stores prompts", param="log_prompt")
    fs.use(Feature.ADAPTER, "peft", b.peft)
    fs.use(Feature.PROMPT_LOGPROBS, "loglikelihood", b.loglikelihood)
    return {"prompt_logprobs": 0 if b.loglikelihood else None}


def _functions(b: OctoChatBody, fs: FeatureSet) -> dict[str, JSON] | None:
    """OpenAI's deprecated function calling (octoai-sdk 0.10 sends both keys, as null): as for OpenAI
    clients, by name to targets that take OpenAI's platform fields, refused by name by the rest; a
    ``function_call`` of "none" or "auto" with no functions asks nothing."""
    extra: dict[str, JSON] = {}
    if b.functions:
        extra["functions"] = b.functions
    if b.function_call is not None and (b.functions or b.function_call not in ("none", "auto")):
        extra["function_call"] = b.function_call
    for name in extra:
        fs.use(Feature.EXTRA_BODY, name)
    return extra or None


def parse_completion(data: dict[str, JSON]) -> InternalRequest:
    if isinstance(data.get("logit_bias"), dict):
        data = {**data, "logit_bias": {k: v for k, v in data["logit_bias"].items() if v is not None}}
    b = validate(OctoExtras, data)
    if oai.is_plain(b):
        stream_usage = oai.stream_usage(bool(b.stream), b.stream_options)
        return oai.plain_completion(b, b.max_tokens or DEFAULT_MAX_TOKENS, stream_usage, STREAM_FORMAT)
    fs = FeatureSet()
    items = oai.prompts(b.prompt, fs)
    kw = oai.completion_sampling(without(b, "best_of"), fs) | oai.vllm_extras(b, fs)
    if b.best_of is not None:  # OctoAI allows best_of == n (seed 003)
        oai.choices(b.n, b.best_of, bool(b.stream), fs)
        kw["best_of"] = b.best_of
    choice_cap(len(items), kw["n"], b.best_of)
    kw |= _common(b, fs)
    kw["max_tokens"] = b.max_tokens or DEFAULT_MAX_TOKENS
    kw["structured"] = oai.structured_from_vllm(b.structured_outputs, fs)
    stream = bool(b.stream)
    return request_of(
        fs,
        Operation.COMPLETION,
        b.model,
        prompts=items,
        sampling=Sampling(**kw),
        stream=stream,
        stream_usage=oai.stream_usage(stream, b.stream_options),
        adapter=b.peft,
        user=b.user,
        # prompt logprobs are re-encoded, never relayed: the upstream's chunks carry more than asked
        relay=None if b.loglikelihood else oai.relay_for(stream, kw["logprobs"], STREAM_FORMAT),
    )


def parse_chat(data: dict[str, JSON]) -> InternalRequest:
    b = validate(OctoChatBody, data)
    fs = FeatureSet()
    rf = b.response_format
    kw = oai.chat_sampling(without(b, "response_format"), fs) | _common(b, fs)
    if rf is not None and rf.type == "json_object" and isinstance(rf.schema_, dict):
        # OctoAI's JSON mode carries the schema inline as an object (dialects.md §4.6)
        fs.use(Feature.JSON_SCHEMA, "response_format")
        kw["structured"] = StructuredOutput("json_schema", rf.schema_)
    else:
        kw["structured"] = oai.structured_from_format(rf, fs)
    fs.use(Feature.IGNORE_EOS, "ignore_eos", b.ignore_eos)
    fs.use(Feature.MIN_P, "min_p", b.min_p not in (None, 0))
    fs.use(Feature.REPETITION_PENALTY, "repetition_penalty", b.repetition_penalty not in (None, 1))
    kw |= {"ignore_eos": bool(b.ignore_eos), "min_p": b.min_p or None, "repetition_penalty": b.repetition_penalty}
    stream = bool(b.stream)
    return request_of(
        fs,
        Operation.CHAT,
        b.model,
        messages=oai.messages(b),
        sampling=Sampling(**kw),
        chat=oai.chat_options(b, fs),
        stream=stream,
        stream_usage=oai.stream_usage(stream, b.stream_options),
        adapter=b.peft,
        user=b.user,
        extra_body=_functions(b, fs),
        relay=None if b.loglikelihood else oai.relay_for(stream, kw["logprobs"], STREAM_FORMAT),
    )

"""OpenAI request bodies → the internal request. The helpers here are the OpenAI baseline that the
other dialects (all OpenAI-shaped at heart, dialects.md §5) build on; each adds only its own fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from gateway.core import caps
from gateway.core.errors import InvalidRequest
from gateway.core.request import (
    ChatMessage,
    ChatOptions,
    Feature,
    InternalRequest,
    Operation,
    PromptItem,
    Sampling,
    StructuredOutput,
)
from gateway.dialects.common import (
    FeatureSet,
    check,
    choice_cap,
    exclusive,
    logit_bias,
    plain_number,
    request_of,
    stop_list,
    validate,
    validated,
)
from gateway.dialects.openai import shapes
from gateway.dialects.openai.schema import (
    PLATFORM_FIELDS,
    ROLES,
    STREAM_FORMAT,
    ChatBody,
    CompletionBody,
    OpenAIChatBody,
    ResponseFormat,
    StreamOptions,
    StructuredOutputs,
    VLLMExtras,
)

JSON = Any


def prompts(
    prompt: str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]], fs: FeatureSet
) -> tuple[PromptItem, ...]:
    if isinstance(prompt, str):
        return (prompt,)
    if not prompt:
        raise InvalidRequest("'prompt' must not be empty", param="prompt")
    first = prompt[0]
    items: tuple[PromptItem, ...]
    if isinstance(first, str):
        items = tuple(str(p) for p in prompt)
    elif isinstance(first, int):
        fs.use(Feature.TOKEN_PROMPT, "prompt")
        items = (tuple(prompt),)  # type: ignore[arg-type]
    else:
        fs.use(Feature.TOKEN_PROMPT, "prompt")
        items = tuple(tuple(p) for p in prompt)  # type: ignore[arg-type]
        if any(not p for p in items):
            raise InvalidRequest("'prompt' must not contain empty token lists", param="prompt")
    fs.use(Feature.BATCH_PROMPT, "prompt", len(items) > 1)
    return items


def choices(n: int | None, best_of: int | None, stream: bool, fs: FeatureSet, *, strict_gt: bool = False) -> int:
    count = n or 1
    fs.use(Feature.N, "n", count > 1)
    if best_of is not None:
        if best_of < count or (strict_gt and best_of == count and count > 1):
            raise InvalidRequest("'best_of' must be greater than or equal to 'n'", param="best_of")
        if best_of > count:
            if stream:
                raise InvalidRequest("'best_of' cannot be used with 'stream'", param="best_of")
            fs.use(Feature.BEST_OF, "best_of")
    return count


def stream_usage(stream: bool, options: StreamOptions | None) -> bool:
    if options is not None and not stream:
        raise InvalidRequest("'stream_options' is only allowed when 'stream' is true", param="stream_options")
    return bool(options and options.include_usage)


def structured_from_vllm(so: StructuredOutputs | None, fs: FeatureSet) -> StructuredOutput | None:
    if so is None:
        return None
    given = [
        (k, v)
        for k, v in (
            ("json", so.json_),
            ("regex", so.regex),
            ("choice", so.choice),
            ("grammar", so.grammar),
            ("json_object", so.json_object or None),
        )
        if v is not None
    ]
    if len(given) != 1:
        raise InvalidRequest("'structured_outputs' needs exactly one constraint", param="structured_outputs")
    key, value = given[0]
    kind = {"json": "json_schema", "json_object": "json_object"}.get(key, key)
    out = StructuredOutput(kind, None if kind == "json_object" else value)  # type: ignore[arg-type]
    fs.use(Feature(kind), "structured_outputs")
    return out


def structured_from_format(rf: ResponseFormat | None, fs: FeatureSet) -> StructuredOutput | None:
    """OpenAI's ``response_format``; Friendli's and OctoAI's variants are handled by their codecs."""
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_object":
        fs.use(Feature.JSON_OBJECT, "response_format")
        return StructuredOutput("json_object")
    if rf.type == "json_schema":
        if rf.json_schema is None or rf.json_schema.schema_ is None:
            raise InvalidRequest("'response_format.json_schema.schema' is required", param="response_format")
        fs.use(Feature.JSON_SCHEMA, "response_format")
        return StructuredOutput("json_schema", rf.json_schema.schema_)
    raise InvalidRequest(f"'response_format.type' {rf.type!r} is not supported", param="response_format.type")


VLLM_SAMPLING_FIELDS = frozenset(
    {"top_k", "min_p", "repetition_penalty", "min_tokens", "stop_token_ids", "bad_words", "ignore_eos"}
    | {"include_stop_str_in_output"}
)
NO_VLLM_SAMPLING: dict[str, Any] = {
    "top_k": None,
    "min_p": None,
    "repetition_penalty": None,
    "min_tokens": None,
    "stop_token_sequences": (),
    "bad_words": (),
    "ignore_eos": False,
    "include_stop_str_in_output": False,
}


def vllm_extras(b: VLLMExtras, fs: FeatureSet) -> dict[str, Any]:
    """vLLM's sampling extensions; most requests name none of them (callers merge, never change, the
    shared answer)."""
    if VLLM_SAMPLING_FIELDS.isdisjoint(b.model_fields_set):
        return NO_VLLM_SAMPLING
    fs.use(Feature.TOP_K, "top_k", b.top_k not in (None, 0, -1))
    fs.use(Feature.MIN_P, "min_p", b.min_p not in (None, 0))
    fs.use(Feature.REPETITION_PENALTY, "repetition_penalty", b.repetition_penalty not in (None, 1))
    fs.use(Feature.MIN_TOKENS, "min_tokens", b.min_tokens not in (None, 0))
    fs.use(Feature.STOP_TOKEN_IDS, "stop_token_ids", b.stop_token_ids)
    fs.use(Feature.BAD_WORDS, "bad_words", b.bad_words)
    fs.use(Feature.IGNORE_EOS, "ignore_eos", b.ignore_eos)
    fs.use(Feature.INCLUDE_STOP_STR, "include_stop_str_in_output", b.include_stop_str_in_output)
    return {
        "top_k": b.top_k if b.top_k not in (None, 0, -1) else None,
        "min_p": b.min_p or None,
        "repetition_penalty": b.repetition_penalty,
        "min_tokens": b.min_tokens or None,
        "stop_token_sequences": tuple((t,) for t in b.stop_token_ids or ()),
        "bad_words": tuple(b.bad_words or ()),
        "ignore_eos": bool(b.ignore_eos),
        "include_stop_str_in_output": bool(b.include_stop_str_in_output),
    }


def penalties(b: CompletionBody | ChatBody, fs: FeatureSet) -> dict[str, Any]:
    bias = logit_bias(b.logit_bias)
    fs.use(Feature.LOGIT_BIAS, "logit_bias", bias)
    fs.use(Feature.SEED, "seed", b.seed is not None)
    fs.use(Feature.STOP, "stop", b.stop)
    return {
        "temperature": b.temperature,
        "top_p": b.top_p,
        "presence_penalty": b.presence_penalty,
        "frequency_penalty": b.frequency_penalty,
        "logit_bias": bias,
        "seeds": (b.seed,) if b.seed is not None else None,
        "stop": stop_list(b.stop),
    }


def completion_sampling(b: CompletionBody, fs: FeatureSet) -> dict[str, Any]:
    stream = bool(b.stream)
    fs.use(Feature.LOGPROBS, "logprobs", b.logprobs is not None)
    fs.use(Feature.ECHO, "echo", b.echo)
    fs.use(Feature.SUFFIX, "suffix", b.suffix is not None)
    return {
        **penalties(b, fs),
        "max_tokens": b.max_tokens,
        "n": choices(b.n, b.best_of, stream, fs),
        "best_of": b.best_of,
        "logprobs": b.logprobs,
        "echo": bool(b.echo),
        "suffix": b.suffix,
    }


# The body most clients send: a model, one text prompt, a length, perhaps temperature, top_p and a
# stream. Such a body is built by ``plain_completion`` without the full parse's walk over every field
# of every dialect (helpers, a FeatureSet, a Sampling of 35 keyword arguments: about half of a full
# parse, docs/performance.md). Each dialect's full parser is the
# reference: tests/unit/test_plain_parse.py generates bodies and checks both give the same request.
PLAIN_FIELDS = frozenset({"model", "prompt", "max_tokens", "temperature", "top_p", "stream", "stream_options"})


def is_plain(b: BaseModel) -> bool:
    return b.model_fields_set <= PLAIN_FIELDS and isinstance(getattr(b, "prompt", None), str)


def plain_completion(
    b: Any,
    max_tokens: int | None,
    stream_usage: bool,
    relay: str | None,
    seeds: tuple[int, ...] | None = None,
    **flags: Any,
) -> InternalRequest:
    """A plain body's request (``is_plain``); ``seeds``: one the dialect drew; ``flags``: the
    dialect's own constant fields."""
    stream = bool(b.stream)
    return InternalRequest(
        operation=Operation.COMPLETION,
        model=b.model,
        prompts=(b.prompt,),
        sampling=Sampling(max_tokens=max_tokens, temperature=b.temperature, top_p=b.top_p, seeds=seeds),
        stream=stream,
        stream_usage=stream_usage,
        relay=relay if stream else None,
        **flags,
    )


def relay_for(stream: bool, logprobs: int | None, relay: str | None) -> str | None:
    """Logprobs are re-encoded even between same-format ends: their text offsets are recomputed."""
    return relay if stream and logprobs is None else None


def parse_completion(data: dict[str, JSON], relay: str | None = None) -> InternalRequest:
    b = validate(CompletionBody, data)
    if is_plain(b):
        return plain_completion(b, b.max_tokens, stream_usage(bool(b.stream), b.stream_options), relay)
    fs = FeatureSet()
    items = prompts(b.prompt, fs)
    kw = completion_sampling(b, fs) | vllm_extras(b, fs)
    choice_cap(len(items), kw["n"], b.best_of)
    kw["structured"] = structured_from_vllm(b.structured_outputs, fs)
    fs.use(Feature.TOKEN_IDS, "return_token_ids", b.return_token_ids)  # vLLM's; OpenAI refuses it
    stream = bool(b.stream)
    return request_of(
        fs,
        Operation.COMPLETION,
        b.model,
        prompts=items,
        sampling=Sampling(**kw),
        stream=stream,
        stream_usage=stream_usage(stream, b.stream_options),
        user=b.user,
        want_token_ids=bool(b.return_token_ids),
        relay=relay_for(stream, kw["logprobs"], relay),
    )


# --- chat ----------------------------------------------------------------------------------------


def messages(b: ChatBody) -> tuple[ChatMessage, ...]:
    for i, m in enumerate(b.messages):
        if isinstance(m.content, list):
            shapes.check_content(m.content, f"messages[{i}].content", m.role)
        if m.tool_calls:
            shapes.check_tool_calls(m.tool_calls, f"messages[{i}].tool_calls")
    return tuple(
        ChatMessage(
            role=m.role,
            content=m.content if isinstance(m.content, str) or m.content is None else tuple(m.content),
            name=m.name,
            tool_calls=tuple(m.tool_calls) if m.tool_calls else None,
            tool_call_id=m.tool_call_id,
        )
        for m in b.messages
    )


def chat_sampling(b: ChatBody, fs: FeatureSet) -> dict[str, Any]:
    exclusive(b, "max_tokens", "max_completion_tokens")
    stream = bool(b.stream)
    if b.top_logprobs is not None and not b.logprobs:
        raise InvalidRequest("'top_logprobs' requires 'logprobs' to be true", param="top_logprobs")
    fs.use(Feature.LOGPROBS, "logprobs", b.logprobs)
    return {
        **penalties(b, fs),
        "max_tokens": b.max_tokens or b.max_completion_tokens,
        "n": choices(b.n, None, stream, fs),
        "logprobs": (b.top_logprobs or 0) if b.logprobs else None,
        "structured": structured_from_format(b.response_format, fs),
    }


def chat_options(b: ChatBody, fs: FeatureSet, reasoning: dict[str, JSON] | None = None) -> ChatOptions:
    shapes.check_tools(b.tools, b.tool_choice)
    fs.use(Feature.TOOLS, "tools", b.tools)
    fs.use(Feature.TOOLS, "tool_choice", b.tool_choice not in (None, "none", "auto") and not b.tools)
    reasoning = {k: v for k, v in (reasoning or {}).items() if v is not None}
    if b.reasoning_effort is not None:
        reasoning["reasoning_effort"] = b.reasoning_effort
    fs.use(Feature.REASONING, next(iter(reasoning), "reasoning_effort"), reasoning)
    return ChatOptions(
        tools=tuple(b.tools) if b.tools else None,
        tool_choice=b.tool_choice if b.tools else None,
        parallel_tool_calls=b.parallel_tool_calls if b.tools else None,
        reasoning=reasoning or None,
    )


# The chat body most clients send: a model, its messages, a length, perhaps temperature, top_p and a
# stream. Built by ``plain_chat`` without the sampling, options and feature walk of the full parse
# (29.3 -> 13.4 us per parse, docs/performance.md); tests/unit/test_plain_parse.py checks both paths
# give the same request or error.
PLAIN_CHAT_FIELDS = frozenset({"model", "messages", "max_tokens", "temperature", "top_p", "stream", "stream_options"})
PLAIN_CHAT_OPTIONS = ChatOptions()


def is_plain_chat(b: ChatBody) -> bool:
    return b.model_fields_set <= PLAIN_CHAT_FIELDS


def plain_chat(
    model: str, msgs: tuple[ChatMessage, ...], sampling: Sampling, stream: bool, usage: bool, relay: str | None
) -> InternalRequest:
    """A plain chat body's request (``is_plain_chat``, ``typed_plain_chat``)."""
    return InternalRequest(
        operation=Operation.CHAT,
        model=model,
        messages=msgs,
        sampling=sampling,
        chat=PLAIN_CHAT_OPTIONS,
        stream=stream,
        stream_usage=usage,
        relay=relay if stream else None,
    )


def _typed_messages(msgs: JSON) -> tuple[ChatMessage, ...] | None:
    """Messages of a role and a text only, as the schema would take them; None for any other shape
    (or more of them than ``check`` lets through)."""
    if type(msgs) is not list or not msgs or len(msgs) > caps.MAX_ITEMS:
        return None
    out = []
    for m in msgs:
        if type(m) is not dict or len(m) != 2:
            return None
        role, content = m.get("role"), m.get("content")
        if type(role) is not str or role not in ROLES or type(content) is not str:
            return None
        out.append(ChatMessage(role=role, content=content))
    return tuple(out)


def typed_plain_chat(data: dict[str, JSON], relay: str | None) -> InternalRequest | None:
    """A plain chat body (a model, messages of a role and a text, a length, temperature, top_p, a
    stream and its usage option) read by type checks alone: the schema's validation costs more than the
    rest of the parse (docs/performance.md). What it takes, ``check`` passes (no float but a bounded
    one, no list past its cap, no token ids), so a plain body is not walked by it. None for any value
    the schema might coerce, refuse or read otherwise: ``check`` and the full parse then judge it.
    tests/unit/test_plain_parse.py holds both to the same request or error."""
    model, max_tokens = data.get("model"), data.get("max_tokens")
    if not data.keys() <= PLAIN_CHAT_FIELDS or type(model) is not str or len(model) > caps.MAX_NAME:
        return None
    if max_tokens is not None and (type(max_tokens) is not int or not 1 <= max_tokens <= caps.MAX_TOKENS):
        return None
    temperature, top_p = data.get("temperature"), data.get("top_p")
    stream, options = data.get("stream"), data.get("stream_options")
    if not (plain_number(temperature, 2) and plain_number(top_p, 1)):
        return None
    if stream is not None and type(stream) is not bool:
        return None
    usage = None
    if options is not None:  # without a stream: the full parse's refusal
        if not stream or type(options) is not dict or not options.keys() <= {"include_usage"}:
            return None
        usage = options.get("include_usage")
        if usage is not None and type(usage) is not bool:
            return None
    msgs = _typed_messages(data.get("messages"))
    if msgs is None:
        return None
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=None if temperature is None else float(temperature),
        top_p=None if top_p is None else float(top_p),
    )
    return plain_chat(model, msgs, sampling, bool(stream), bool(usage), relay)


def parse_chat(data: dict[str, JSON], relay: str | None = None) -> InternalRequest:
    typed = typed_plain_chat(data, relay)
    if typed is not None:
        return typed
    check(data)
    b = validated(OpenAIChatBody, data)
    if is_plain_chat(b):
        stream = bool(b.stream)
        sampling = Sampling(max_tokens=b.max_tokens, temperature=b.temperature, top_p=b.top_p)
        usage = stream_usage(stream, b.stream_options)
        return plain_chat(b.model, messages(b), sampling, stream, usage, relay)
    fs = FeatureSet()
    kw = chat_sampling(b, fs) | vllm_extras(b, fs)
    vllm_so = structured_from_vllm(b.structured_outputs, fs)
    if vllm_so is not None:
        if kw["structured"] is not None:
            raise InvalidRequest("give 'response_format' or 'structured_outputs', not both", param="structured_outputs")
        kw["structured"] = vllm_so
    extra = {name: getattr(b, name) for name in PLATFORM_FIELDS if getattr(b, name) is not None}
    for name in extra:
        fs.use(Feature.EXTRA_BODY, name)
    fs.use(Feature.TOKEN_IDS, "return_token_ids", b.return_token_ids)
    stream = bool(b.stream)
    return request_of(
        fs,
        Operation.CHAT,
        b.model,
        messages=messages(b),
        sampling=Sampling(**kw),
        chat=chat_options(b, fs, {"chat_template_kwargs": b.chat_template_kwargs}),
        stream=stream,
        stream_usage=stream_usage(stream, b.stream_options),
        user=b.user,
        extra_body=extra or None,
        want_token_ids=bool(b.return_token_ids),
        relay=relay_for(stream, kw["logprobs"], relay),
    )


def parse(operation: Operation, data: dict[str, JSON]) -> InternalRequest:
    """An OpenAI client's request: its streams take an OpenAI-compatible upstream's chunks as they are."""
    return (
        parse_completion(data, STREAM_FORMAT) if operation is Operation.COMPLETION else parse_chat(data, STREAM_FORMAT)
    )

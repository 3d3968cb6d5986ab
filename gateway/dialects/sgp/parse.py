"""Scale SGP bodies → the internal request: the max-token synonyms collapsed with a documented
precedence, ``logprobs`` as bool (a58) or int (a62), one output constraint among ``guided_*`` and
``response_format``, ``inference_timeout`` in seconds, pass-through parameters and headers (never
one the gateway sets or a vendor's protocol header: ``dialects/headers.py``).
"""

from __future__ import annotations

from typing import Any

from gateway.core import caps
from gateway.core.errors import InvalidRequest
from gateway.core.request import Feature, InternalRequest, Operation, Sampling, StructuredOutput
from gateway.dialects.common import FeatureSet, choice_cap, request_of, stop_list, validate, without
from gateway.dialects.headers import refused_header
from gateway.dialects.openai import parse as oai
from gateway.dialects.openai.schema import STREAM_FORMAT, ResponseFormat
from gateway.dialects.sgp.schema import Guided, SGPChatBody, SGPCompletionBody

JSON = Any


def max_new_tokens(b: SGPCompletionBody) -> int | None:
    """Precedence max_tokens > max_completion_tokens > max_new_tokens; differing values are refused
    because SGP documents no precedence of its own (dialects.md §3.2)."""
    given = [
        (n, v) for n in ("max_tokens", "max_completion_tokens", "max_new_tokens") if (v := getattr(b, n)) is not None
    ]
    if len({v for _, v in given}) > 1:
        names = " and ".join(f"'{n}'" for n, _ in given)
        raise InvalidRequest(f"{names} are synonyms but were given different values", param=given[1][0])
    return given[0][1] if given else None


def guided(b: Guided, rf: ResponseFormat | None, fs: FeatureSet) -> StructuredOutput | None:
    options: list[tuple[str, StructuredOutput]] = []
    for name, kind, value in (
        ("guided_json", "json_schema", b.guided_json),
        ("guided_regex", "regex", b.guided_regex),
        ("guided_choice", "choice", b.guided_choice),
        ("guided_grammar", "grammar", b.guided_grammar),
    ):
        if value is not None:
            options.append((name, StructuredOutput(kind, value)))  # type: ignore[arg-type]
            fs.use(Feature(kind), name)
    from_format = oai.structured_from_format(rf, fs)
    if from_format is not None:
        options.append(("response_format", from_format))
    if len(options) > 1:
        raise InvalidRequest(
            f"only one output constraint may be given, got {' and '.join(n for n, _ in options)}", param=options[1][0]
        )
    return options[0][1] if options else None


def timeout(value: float | str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise InvalidRequest("'inference_timeout' must be a number of seconds", param="inference_timeout") from None
    if not 0 < seconds <= caps.MAX_TIMEOUT_S:  # also false for NaN
        raise InvalidRequest(
            f"'inference_timeout' must be within (0, {caps.MAX_TIMEOUT_S}] seconds", param="inference_timeout"
        )
    return seconds


def passthrough(b: Guided, fs: FeatureSet) -> tuple[dict[str, JSON], dict[str, str] | None]:
    extra = dict(b.inference_extra_params or {})
    fs.use(Feature.EXTRA_BODY, "inference_extra_params", extra)
    headers = b.inference_extra_headers
    seen: set[str] = set()
    for name, value in (headers or {}).items():
        why = refused_header(name, value) or ("named twice: header names ignore case" if name.lower() in seen else None)
        if why:
            raise InvalidRequest(
                f"'inference_extra_headers' may not set {name[:64]!r} ({why})", param="inference_extra_headers"
            )
        seen.add(name.lower())
    fs.use(Feature.EXTRA_HEADERS, "inference_extra_headers", headers)
    return extra, headers or None


def stream_usage(b: SGPCompletionBody) -> bool:
    """SGP's SDKs read usage from a stream's final chunk (dialects.md §3.5): sent unless the client
    turns it off."""
    return bool(b.stream) and bool((b.stream_options or {}).get("include_usage", True))


def completion_logprobs(b: SGPCompletionBody, fs: FeatureSet) -> int | None:
    """The logprobs asked for: OpenAI's ``logprobs`` (a count, or true with ``top_logprobs``), or SGP's
    own ``return_token_log_probs``."""
    if b.top_logprobs is not None and b.logprobs is not True:
        raise InvalidRequest("'top_logprobs' requires 'logprobs' to be true", param="top_logprobs")
    if b.logprobs is True or (b.logprobs is None and b.return_token_log_probs):
        logprobs: int | None = b.top_logprobs or 0
    else:
        logprobs = None if b.logprobs is False else b.logprobs
    fs.use(Feature.LOGPROBS, "logprobs" if b.logprobs is not None else "return_token_log_probs", logprobs is not None)
    return logprobs


def parse_completion(data: dict[str, JSON]) -> InternalRequest:
    b = validate(SGPCompletionBody, data)
    stream = bool(b.stream)
    if oai.is_plain(b):
        return oai.plain_completion(b, max_new_tokens(b), stream_usage(b), STREAM_FORMAT)
    fs = FeatureSet()
    logprobs = completion_logprobs(b, fs)
    stop = tuple(dict.fromkeys(stop_list(b.stop) + stop_list(b.stop_sequences, "stop_sequences")))
    fs.use(Feature.STOP, "stop" if b.stop else "stop_sequences", stop)
    fs.use(Feature.TOP_K, "top_k", b.top_k not in (None, 0, -1))
    fs.use(Feature.INCLUDE_STOP_STR, "include_stop_str_in_output", b.include_stop_str_in_output)
    fs.use(Feature.ECHO, "echo", b.echo)
    fs.use(Feature.SUFFIX, "suffix", b.suffix is not None)
    extra, headers = passthrough(b, fs)
    for name, feature in (
        ("tools", Feature.TOOLS),
        ("tool_choice", Feature.TOOLS),
        ("parallel_tool_calls", Feature.TOOLS),
        ("audio", Feature.AUDIO),
        ("modalities", Feature.AUDIO),
        ("prediction", Feature.PREDICTION),
    ):
        if getattr(b, name) is not None:
            fs.use(feature, name)
            extra[name] = getattr(b, name)
    kw = oai.penalties(b, fs)  # type: ignore[arg-type]
    kw["stop"] = stop
    items = oai.prompts(b.prompt, fs)
    n = oai.choices(b.n, b.best_of, stream, fs)
    choice_cap(len(items), n, b.best_of)
    return request_of(
        fs,
        Operation.COMPLETION,
        b.model,
        prompts=items,
        sampling=Sampling(
            **kw,
            max_tokens=max_new_tokens(b),
            n=n,
            best_of=b.best_of,
            top_k=b.top_k if b.top_k not in (None, 0, -1) else None,
            logprobs=logprobs,
            echo=bool(b.echo),
            suffix=b.suffix,
            include_stop_str_in_output=bool(b.include_stop_str_in_output),
            structured=guided(b, b.response_format, fs),
        ),
        stream=stream,
        stream_usage=stream_usage(b),
        relay=oai.relay_for(stream, logprobs, STREAM_FORMAT),  # SGP streams OpenAI's chunks (§3.5)
        timeout=timeout(b.inference_timeout),
        user=b.user,
        extra_body=extra or None,
        extra_headers=headers,
    )


def parse_chat(data: dict[str, JSON]) -> InternalRequest:
    b = validate(SGPChatBody, data)
    fs = FeatureSet()
    kw = oai.chat_sampling(without(b, "response_format"), fs)
    kw["structured"] = guided(b, b.response_format, fs)
    fs.use(Feature.TOP_K, "top_k", b.top_k not in (None, 0, -1))
    kw["top_k"] = b.top_k if b.top_k not in (None, 0, -1) else None
    fs.use(Feature.INCLUDE_STOP_STR, "include_stop_str_in_output", b.include_stop_str_in_output)
    kw["include_stop_str_in_output"] = bool(b.include_stop_str_in_output)
    extra, headers = passthrough(b, fs)
    for name in ("guided_decoding_backend", "guided_whitespace_pattern", "chat_template", "memory_strategy"):
        if getattr(b, name) is not None:
            fs.use(Feature.EXTRA_BODY, name)
            extra[name] = getattr(b, name)
    stream = bool(b.stream)
    return request_of(
        fs,
        Operation.CHAT,
        b.model,
        messages=oai.messages(b),
        sampling=Sampling(**kw),
        chat=oai.chat_options(b, fs, {"chat_template_kwargs": b.chat_template_kwargs}),
        stream=stream,
        stream_usage=oai.stream_usage(stream, b.stream_options) or stream,
        relay=oai.relay_for(stream, kw["logprobs"], STREAM_FORMAT),
        timeout=timeout(b.inference_timeout),
        user=b.user,
        extra_body=extra or None,
        extra_headers=headers,
    )

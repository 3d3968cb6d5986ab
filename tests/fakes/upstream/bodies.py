"""Request bodies as vLLM reads them (extra fields ignored) and the sampling checks vLLM makes, with its
wording. Every wire reads its body with these after mapping its vendor's own field names (``wire/``)."""

from __future__ import annotations

import math
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tests.fakes.upstream.errors import ApiError, invalid
from tests.fakes.upstream.model import VOCAB_SIZE, Sampling

MAX_LOGPROBS: Final = 20  # vLLM's --max-logprobs default
MAX_N: Final = 16384  # VLLM_MAX_N_SEQUENCES
GREEDY_EPS: Final = 1e-5
FORCED_OUTPUT: Final = {"json": '{"ok": true}', "json_object": '{"ok": true}', "regex": "42", "grammar": "ok"}
CONSTRAINTS: Final = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
M = TypeVar("M", bound=BaseModel)
JSON = dict[str, Any]

# --- request schemas (vLLM's request models allow extra fields and ignore them) ------------------


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Lenient):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class ChatMessage(_Lenient):
    role: str
    content: str | list[dict[str, Any]] | None = None


class Knobs(_Lenient):
    """The fields completions and chat share."""

    model: str
    n: int | None = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    max_tokens: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool | None = None
    echo: bool | None = False
    structured_outputs: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    # vLLM's server-side beam search: ``n`` is the beam width and the answer holds every beam
    use_beam_search: bool = False
    length_penalty: float = 1.0


class CompletionRequest(Knobs):
    prompt: list[int] | list[list[int]] | str | list[str] | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None


class ChatRequest(Knobs):
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    add_generation_prompt: bool = True
    continue_final_message: bool = False


class TokenizeRequest(_Lenient):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    return_token_strs: bool | None = False


def parse(schema: type[M], body: JSON) -> M:
    try:
        return schema.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = str(first["loc"][0]) if first["loc"] else None
        where = ".".join(str(part) for part in first["loc"])
        raise ApiError(400, f"{exc.error_count()} validation error(s); {where}: {first['msg']}", param) from None


# --- sampling: the request's knobs after vLLM's checks --------------------------------------------


def check_request_level(req: Knobs) -> None:
    """vLLM's request-model validators, which run before the model is looked up."""
    if req.stream_options is not None and not req.stream:
        raise invalid("Stream options can only be defined when `stream=True`.", "stream_options")
    if isinstance(req, CompletionRequest) and req.logprobs is not None and req.logprobs < -1:
        raise invalid("`logprobs` must be a positive value or -1.", "logprobs", req.logprobs)
    if isinstance(req, ChatRequest) and req.top_logprobs is not None:
        if req.top_logprobs < -1:
            raise invalid("`top_logprobs` must be a positive value or -1.", "top_logprobs", req.top_logprobs)
        if req.top_logprobs != 0 and not req.logprobs:
            raise invalid("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")


def check_penalties(req: Knobs) -> None:
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(req, name)
        if value is not None and not -2.0 <= value <= 2.0:
            raise invalid(f"{name} must be in [-2, 2], got {value}.")
    rep = req.repetition_penalty
    if rep is not None and not (math.isfinite(rep) and rep > 0.0):
        raise invalid(f"repetition_penalty must be greater than zero, got {rep}.")


def check_temperature(req: Knobs) -> float:
    t = 1.0 if req.temperature is None else req.temperature
    if not math.isfinite(t):
        raise invalid(f"temperature must be a finite number, got {t}.", "temperature", t)
    if t < 0.0:
        raise invalid(f"temperature must be non-negative, got {t}.", "temperature", t)
    if t > 2.0:
        raise invalid(f"temperature must be in [0, 2], got {t}.", "temperature", t)
    return t


def check_filters(req: Knobs) -> None:
    if req.top_p is not None and not 0.0 < req.top_p <= 1.0:
        raise invalid(f"top_p must be in (0, 1], got {req.top_p}.", "top_p", req.top_p)
    if req.top_k is not None and req.top_k < -1:
        raise invalid(f"top_k must be 0 (disable), or at least 1, got {req.top_k}.")
    if req.min_p is not None and not 0.0 <= req.min_p <= 1.0:
        raise invalid(f"min_p must be in [0, 1], got {req.min_p}.")


def check_n(n: int, greedy: bool) -> None:
    if n < 1:
        raise invalid(f"n must be at least 1, got {n}.", "n", n)
    if n > MAX_N:
        raise invalid(f"n must be at most {MAX_N}, got {n}.", "n", n)
    if greedy and n > 1:
        raise invalid(f"n must be 1 when using greedy sampling, got {n}.")


def check_lengths(max_tokens: int, min_tokens: int) -> None:
    if max_tokens < 1:
        raise invalid(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens)
    if min_tokens < 0:
        raise invalid(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if min_tokens > max_tokens:
        raise invalid(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.")


def check_context(prompt_len: int, requested: int | None, context: int) -> int:
    """vLLM's renderer check, then its default: without ``max_tokens`` the rest of the context."""
    wanted = requested or 0
    if prompt_len + wanted > context:
        raise invalid(
            f"You passed {prompt_len} input tokens and requested {wanted} output tokens. However, the model's "
            f"context length is only {context} tokens, resulting in a maximum input length of "
            f"{context - wanted} tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            prompt_len,
        )
    return context - prompt_len if requested is None else requested


def stop_list(req: Knobs) -> tuple[str, ...]:
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if any(not s for s in stops):
        raise invalid("stop cannot contain an empty string.")
    if any(not w for w in req.bad_words or []):
        raise invalid(f"bad_words cannot contain an empty string. Got bad_words={req.bad_words}")
    return tuple(dict.fromkeys(stops))


def check_logprobs(count: int | None) -> int | None:
    """Admission-time check against ``--max-logprobs`` (-1 means the whole vocabulary)."""
    wanted = VOCAB_SIZE if count == -1 else count
    if wanted is not None and wanted > MAX_LOGPROBS:
        raise invalid(
            f"Requested sample logprobs of {wanted}, which is greater than max allowed: {MAX_LOGPROBS}",
            "logprobs",
            wanted,
        )
    return wanted


def forced_output(req: Knobs) -> str | None:
    """Structured outputs are not decoded for real: each constraint kind pins a fixed answer."""
    so = req.structured_outputs
    if so is not None:
        kinds = [k for k in CONSTRAINTS if so.get(k) is not None]
        if len(kinds) != 1:
            many = "can only use one kind of structured outputs constraint but multiple are specified"
            none = "must use one kind of structured outputs constraint but none are specified"
            raise invalid(f"You {many if kinds else none}: {so}", "structured_outputs")
        if kinds[0] == "choice":
            choices = so["choice"]
            if not isinstance(choices, list) or not choices:
                raise invalid("Choice constraint must be a non-empty list of strings.", "structured_outputs")
            return str(choices[0])
        return FORCED_OUTPUT.get(kinds[0], "")
    kind = (req.response_format or {}).get("type", "text")
    if kind not in ("text", "json_object", "json_schema", "structural_tag"):
        raise invalid(f"Unknown response_format type: {kind}", "response_format")
    return FORCED_OUTPUT["json"] if kind in ("json_object", "json_schema") else None


def build_sampling(req: Knobs, prompt_len: int, requested: int | None, logprobs: int | None, context: int) -> Sampling:
    """vLLM's order: render (context) check, then ``SamplingParams`` checks, then admission."""
    max_tokens = check_context(prompt_len, requested, context)
    check_penalties(req)
    temperature = check_temperature(req)
    check_filters(req)
    # beams are ranked, not sampled: vLLM checks ``n`` against greedy decoding only without them
    check_n(1 if req.n is None else req.n, temperature < GREEDY_EPS and not req.use_beam_search)
    check_lengths(max_tokens, req.min_tokens)
    stops = stop_list(req)
    return Sampling(
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        greedy=temperature < GREEDY_EPS,
        seed=None if req.seed == -1 else req.seed,
        ignore_eos=req.ignore_eos,
        stop=stops,
        stop_token_ids=frozenset(req.stop_token_ids or ()),
        include_stop=req.include_stop_str_in_output,
        bad_words=frozenset(w.strip() for w in req.bad_words or ()),
        logprobs=check_logprobs(logprobs),
        forced=forced_output(req),
    )

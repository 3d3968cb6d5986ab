"""A fake OpenAI-compatible upstream that answers like vLLM (0.32+), for the gateway's tests.

The gateway's "openai" adapter is pointed at it (base URL ``http://127.0.0.1:PORT/v1``). It follows
vLLM's wire format (``shared/reference/vllm.md`` §3, ``shared/dialects.md`` §1): response and chunk
shapes, ``[DONE]``, the usage chunk, ``return_token_ids``, legacy and chat logprobs, vLLM's 400/404
envelope and wording, and vLLM's habit of silently ignoring unknown fields (the removed ``guided_*``
among them), which stay visible in ``.requests`` so tests can assert the gateway never sends them.

The "model" is deterministic. A token is a word with its leading whitespace; its id is
``crc32(word) % 32000``. The answer is a pseudo-random sequence of words from ``VOCAB`` seeded by
(prompt text, ``seed``, choice index); after ``NATURAL_LENGTH`` words the model emits EOS (id 2,
``</s>``), which, as in vLLM, counts as a completion token and appears in ``token_ids`` but not in
the text.

Faults are asked for by a marker in the prompt (any string of a batch) or in the last chat message, so
they work through the gateway from any client; several markers combine:

* ``[[fault:status=500]]`` (any status) answers that status with the error envelope;
  ``[[fault:status=429,retry_after=2]]`` adds ``Retry-After: 2``.
* ``[[fault:reset_before]]`` drops the TCP connection before any header is sent.
* ``[[fault:reset_after=3]]`` streams three token chunks, then drops the connection (no ``[DONE]``);
  on a non-streaming request it drops the connection instead of answering.
* ``[[fault:error_after=2]]`` streams two token chunks, then vLLM's in-stream error event
  (``data: {"error": {...}}`` after the 200) and ``[DONE]``.
* ``[[fault:hang_before=S]]`` waits S seconds before answering.
* ``[[fault:hang_between=S]]`` and ``[[fault:slow=S]]`` (the same delay) wait S seconds before every
  stream event after the first, ``[DONE]`` included; a non-streaming answer waits S per token.
* ``[[fault:once:...]]`` applies only to the first request carrying that exact marker text, so a
  retry succeeds; add ``id=x`` to tell two otherwise equal markers apart.

``.cancelled`` counts generation requests whose client hung up before the answer was complete (mid
stream, or during a hang); ``.active`` counts generation requests in flight.

What does not belong here: other vendors' dialects (``tests/upstreams/vendors.py``) and anything
of the gateway's own; this module imports nothing from the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hmac
import json
import math
import random
import re
import signal
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

JSON = dict[str, Any]
M = TypeVar("M", bound=BaseModel)
# FastAPI's JSONResponse and pydantic's model_dump_json: compact, UTF-8 left unescaped.
dumps: Final = functools.partial(json.dumps, separators=(",", ":"), ensure_ascii=False)

WORDS: Final = (
    "amber birch cedar delta ember fable garnet harbor indigo jasper kettle lantern meadow nectar orchid"
    " pebble quartz raven saffron timber umber velvet willow xenon yarrow zephyr anchor beacon cobalt drift"
)
VOCAB: Final = tuple(WORDS.split())
NATURAL_LENGTH: Final = 8
VOCAB_SIZE: Final = 32000
EOS_ID: Final = 2
EOS_TOKEN: Final = "</s>"
MAX_MODEL_LEN: Final = 2048
MAX_LOGPROBS: Final = 20  # vLLM's --max-logprobs default
MAX_N: Final = 16384  # VLLM_MAX_N_SEQUENCES
GREEDY_EPS: Final = 1e-5
POLL_SECONDS: Final = 0.02
GENERATION_PATHS: Final = frozenset({"/v1/completions", "/v1/chat/completions"})
TOKEN_RE: Final = re.compile(r"\s*\S+|\s+")
FAULT_RE: Final = re.compile(r"\[\[fault:(once:)?([^\]]*)\]\]")
FORCED_OUTPUT: Final = {"json": '{"ok": true}', "json_object": '{"ok": true}', "regex": "42", "grammar": "ok"}
CONSTRAINTS: Final = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
ERROR_TYPES: Final = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError", 500: "InternalServerError"}


# --- tokenizer -----------------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """Words with their leading whitespace; trailing whitespace is a token of its own."""
    return TOKEN_RE.findall(text)


def token_id(token: str) -> int:
    return EOS_ID if token == EOS_TOKEN else zlib.crc32(token.encode()) % VOCAB_SIZE


class Vocabulary:
    """Token strings by id, learnt from every text this server tokenized (a crc32 cannot be inverted)."""

    def __init__(self) -> None:
        self._strings: dict[int, str] = {EOS_ID: EOS_TOKEN}
        for word in VOCAB:
            self.encode(" " + word)

    def encode(self, text: str) -> list[int]:
        ids = []
        for token in tokenize(text):
            ids.append(token_id(token))
            self._strings.setdefault(ids[-1], token)
        return ids

    def token(self, tid: int) -> str:
        return self._strings.get(tid, f"<{tid}>")

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.token(tid) for tid in ids)


# --- errors --------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answered as ``{"error": {message, type, param, code}}``, vLLM's envelope."""

    def __init__(
        self, status: int, message: str, param: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, dict(headers or {})

    def envelope(self) -> JSON:
        kind = ERROR_TYPES.get(self.status) or HTTPStatus(self.status).phrase.replace(" ", "") + "Error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}

    def response(self) -> web.Response:
        return web.json_response(self.envelope(), status=self.status, headers=self.headers, dumps=dumps)


def invalid(message: str, param: str | None = None, value: object = None) -> ApiError:
    """A 400 worded like vLLM's ``VLLMValidationError``, whose ``str()`` appends parameter and value."""
    extras = ([f"parameter={param}"] if param else []) + ([f"value={value}"] if value is not None else [])
    return ApiError(400, f"{message} ({', '.join(extras)})" if extras else message, param)


class ClientGone(Exception):
    """The client closed the connection while the fake was still answering."""


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


class CompletionRequest(Knobs):
    prompt: list[int] | list[list[int]] | str | list[str] | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None


class ChatRequest(Knobs):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    add_generation_prompt: bool = True


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


@dataclass(frozen=True, slots=True)
class Sampling:
    max_tokens: int
    min_tokens: int
    greedy: bool
    seed: int | None
    ignore_eos: bool
    stop: tuple[str, ...]
    stop_token_ids: frozenset[int]
    include_stop: bool
    bad_words: frozenset[str]
    logprobs: int | None  # alternatives per token; None when not asked
    forced: str | None  # the text structured outputs pin the answer to


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


def check_context(prompt_len: int, requested: int | None) -> int:
    """vLLM's renderer check, then its default: without ``max_tokens`` the rest of the context."""
    wanted = requested or 0
    if prompt_len + wanted > MAX_MODEL_LEN:
        raise invalid(
            f"You passed {prompt_len} input tokens and requested {wanted} output tokens. However, the model's "
            f"context length is only {MAX_MODEL_LEN} tokens, resulting in a maximum input length of "
            f"{MAX_MODEL_LEN - wanted} tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            prompt_len,
        )
    return MAX_MODEL_LEN - prompt_len if requested is None else requested


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


def build_sampling(req: Knobs, prompt_len: int, requested: int | None, logprobs: int | None) -> Sampling:
    """vLLM's order: render (context) check, then ``SamplingParams`` checks, then admission."""
    max_tokens = check_context(prompt_len, requested)
    check_penalties(req)
    temperature = check_temperature(req)
    check_filters(req)
    check_n(1 if req.n is None else req.n, temperature < GREEDY_EPS)
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


# --- the engine ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float | None  # None for a prompt's first token
    top: tuple[tuple[str, float], ...]  # the sampled token first, then lower alternatives


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step of one choice: the token, the text it releases, and whether it ended."""

    token_id: int
    text: str
    finish_reason: str | None
    stop_reason: int | str | None
    logprob: TokenLogprob | None


@dataclass(frozen=True, slots=True)
class Choice:
    steps: tuple[Step, ...]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps)

    @property
    def token_ids(self) -> list[int]:
        return [s.token_id for s in self.steps]

    @property
    def logprobs(self) -> list[TokenLogprob]:
        return [s.logprob for s in self.steps if s.logprob is not None]


def token_logprob(token: str, pos: int, alternatives: int, banned: frozenset[str]) -> TokenLogprob:
    """Deterministic values: the sampled token ranks first, ``alternatives - 1`` vocabulary words follow."""
    lp = -round((zlib.crc32(f"{pos}:{token}".encode()) % 2000 + 1) / 1000, 3)
    start = zlib.crc32(token.encode()) % len(VOCAB)
    rotated = [" " + VOCAB[(start + i) % len(VOCAB)] for i in range(len(VOCAB))]
    others = [w for w in rotated if w != token and w.strip() not in banned][: max(alternatives - 1, 0)]
    return TokenLogprob(token, lp, ((token, lp), *((w, round(lp - 0.75 * (i + 1), 3)) for i, w in enumerate(others))))


class Picker:
    """Chooses each next token: forced text, the natural answer, or EOS."""

    def __init__(self, prompt_key: str, s: Sampling, index: int) -> None:
        seed = "" if s.greedy else str(s.seed)
        self._rng = random.Random(f"{prompt_key}\x1f{seed}\x1f{index}")
        self._s = s
        self._forced = tokenize(s.forced) if s.forced is not None else None

    def next(self, pos: int) -> str:
        if self._forced is not None:
            return self._forced[pos] if pos < len(self._forced) else EOS_TOKEN
        if pos >= NATURAL_LENGTH and pos >= self._s.min_tokens and not self._s.ignore_eos:
            return EOS_TOKEN
        for _ in range(8 * len(VOCAB)):
            word = " " + self._rng.choice(VOCAB)
            if self._allowed(word, pos):
                return word
        return EOS_TOKEN

    def _allowed(self, word: str, pos: int) -> bool:
        # min_tokens masks stop token ids as well as EOS (vLLM's MinTokensLogitsProcessor).
        blocked = pos < self._s.min_tokens and token_id(word) in self._s.stop_token_ids
        return word.strip() not in self._s.bad_words and not blocked


def find_stop(text: str, new_chars: int, stops: Sequence[str], include: bool) -> tuple[str, int] | None:
    """vLLM's ``check_stop_strings``: first stop string in list order found in the new text."""
    for stop in stops:
        at = text.find(stop, max(0, len(text) - new_chars - len(stop) + 1))
        if at != -1:
            return stop, at + len(stop) if include else at
    return None


def generate(prompt_key: str, prompt_len: int, s: Sampling, index: int) -> Choice:
    """Decode one choice step by step, holding back text that could still become a stop string."""
    picker, text, released = Picker(prompt_key, s, index), "", 0
    steps: list[Step] = []
    hold_back = max(map(len, s.stop)) - 1 if s.stop and not s.include_stop else 0
    limit = min(s.max_tokens, MAX_MODEL_LEN - prompt_len)
    for pos in range(limit):
        token = picker.next(pos)
        tid = token_id(token)
        finish: str | None = None
        reason: int | str | None = None
        before = len(text)
        if token == EOS_TOKEN or tid in s.stop_token_ids:
            finish, reason = "stop", None if token == EOS_TOKEN else tid
        if finish is None or (s.include_stop and token != EOS_TOKEN):
            text += token
        if s.stop and pos + 1 > s.min_tokens and (hit := find_stop(text, len(text) - before, s.stop, s.include_stop)):
            reason, text, finish = hit[0], text[: hit[1]], "stop"
        if finish is None and pos + 1 >= limit:
            finish = "length"
        visible = len(text) if finish else max(released, len(text) - hold_back)
        lp = token_logprob(token, pos, s.logprobs, s.bad_words) if s.logprobs is not None else None
        steps.append(Step(tid, text[released:visible], finish, reason, lp))
        released = visible
        if finish:
            break
    return Choice(tuple(steps))


# --- jobs: a validated request and its generated choices ------------------------------------------


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    ids: list[int]


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    created: int
    model: str
    prompts: tuple[Prompt, ...]
    n: int
    choices: tuple[Choice, ...]  # prompt-major: choice index = prompt_i * n + j
    stream: bool
    include_usage: bool
    continuous_usage: bool
    token_ids: bool
    logprobs: int | None
    echo: bool
    echo_text: str = ""  # chat: the last assistant message, when echo is asked
    role: str = "assistant"
    prompt_logprobs: tuple[tuple[TokenLogprob | None, ...], ...] = ()

    def prompt_of(self, index: int) -> Prompt:
        return self.prompts[index // self.n]

    def usage(self) -> JSON:
        prompt = sum(len(p.ids) for p in self.prompts)
        completion = sum(len(c.steps) for c in self.choices)
        return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}


def make_job(req: Knobs, prompts: list[Prompt], id_prefix: str, request_id: str, **extra: Any) -> Job:
    n = 1 if req.n is None else req.n
    requested: int | None = req.max_tokens
    logprobs: int | None = req.logprobs if isinstance(req, CompletionRequest) else None
    if isinstance(req, ChatRequest):
        requested = req.max_completion_tokens or req.max_tokens
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
    samplings = [build_sampling(req, len(p.ids), requested, logprobs) for p in prompts]
    choices = tuple(
        generate(p.text, len(p.ids), s, j) for p, s in zip(prompts, samplings, strict=True) for j in range(n)
    )
    options = req.stream_options or StreamOptions()
    return Job(
        id=f"{id_prefix}-{request_id}",
        created=int(time.time()),
        model=req.model,
        prompts=tuple(prompts),
        n=n,
        choices=choices,
        stream=bool(req.stream),
        include_usage=bool(req.stream and options.include_usage),
        continuous_usage=bool(req.stream and options.include_usage and options.continuous_usage_stats),
        token_ids=bool(req.return_token_ids),
        logprobs=samplings[0].logprobs,
        echo=bool(req.echo),
        **extra,
    )


def completion_prompts(vocab: Vocabulary, req: CompletionRequest) -> list[Prompt]:
    p = req.prompt
    if p is None or p == "" or p == []:
        raise invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    if isinstance(p, str):
        return [Prompt(p, vocab.encode(p))]
    if all(isinstance(x, str) for x in p):
        return [Prompt(x, vocab.encode(x)) for x in p if isinstance(x, str)]
    lists = [x for x in p if isinstance(x, list)] or [[x for x in p if isinstance(x, int)]]
    for ids in lists:
        if not ids:
            raise invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
        if bad := [i for i in ids if not 0 <= i < VOCAB_SIZE]:
            raise invalid(f"Token id {bad[0]} is out of vocabulary", "prompt")
    return [Prompt(vocab.decode(ids), list(ids)) for ids in lists]


def message_text(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, list):
        texts = (part.get("text") for part in content if isinstance(part, dict) and part.get("type") == "text")
        return "\n".join(str(t) for t in texts)
    return content or ""


def render_chat(messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
    """The fake's chat template: ``<|role|>`` then the text, one message a line."""
    lines = "".join(f"<|{m.role}|> {message_text(m.content)}\n" for m in messages)
    return lines + ("<|assistant|>" if add_generation_prompt else "")


def completion_job(state: UpstreamState, body: JSON, request_id: str) -> Job:
    req = parse(CompletionRequest, body)
    check_request_level(req)
    state.check_model(req.model)
    prompts = completion_prompts(state.vocab, req)
    prompt_lps: tuple[tuple[TokenLogprob | None, ...], ...] = ()
    if req.echo and req.logprobs is not None:
        k = check_logprobs(req.logprobs) or 0
        prompt_lps = tuple(prompt_logprobs(state.vocab, p, k) for p in prompts)
    return make_job(req, prompts, "cmpl", request_id, prompt_logprobs=prompt_lps)


def prompt_logprobs(vocab: Vocabulary, prompt: Prompt, k: int) -> tuple[TokenLogprob | None, ...]:
    first, *rest = [vocab.token(t) for t in prompt.ids]
    return (TokenLogprob(first, None, ()), *(token_logprob(t, i + 1, k, frozenset()) for i, t in enumerate(rest)))


def chat_job(state: UpstreamState, body: JSON, request_id: str) -> Job:
    req = parse(ChatRequest, body)
    check_request_level(req)
    state.check_model(req.model)
    text = render_chat(req.messages, req.add_generation_prompt)
    role = "assistant" if req.add_generation_prompt or not req.messages else req.messages[-1].role
    last = req.messages[-1] if req.messages else None
    echo = message_text(last.content) if req.echo and last is not None and last.role == role else ""
    return make_job(req, [Prompt(text, state.vocab.encode(text))], "chatcmpl", request_id, echo_text=echo, role=role)


# --- rendering -----------------------------------------------------------------------------------


def legacy_logprobs(entries: Sequence[TokenLogprob | None], offset: int) -> JSON:
    out: JSON = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    for entry in entries:
        if entry is None:
            continue
        out["text_offset"].append(offset)
        out["token_logprobs"].append(entry.logprob)
        out["tokens"].append(entry.token)
        out["top_logprobs"].append(dict(entry.top) if entry.logprob is not None else None)
        offset += len(entry.token)
    return out


def chat_logprobs(entries: Sequence[TokenLogprob], k: int) -> JSON:
    def item(token: str, lp: float | None) -> JSON:
        return {"token": token, "logprob": lp, "bytes": list(token.encode())}

    return {"content": [item(e.token, e.logprob) | {"top_logprobs": [item(*t) for t in e.top[:k]]} for e in entries]}


def completion_logprob_entries(job: Job, index: int, steps: Sequence[Step], echo: bool) -> list[TokenLogprob | None]:
    prompt = list(job.prompt_logprobs[index // job.n]) if echo and job.prompt_logprobs else []
    return [*prompt, *(s.logprob for s in steps)]


def completion_body(job: Job) -> JSON:
    choices = []
    for i, c in enumerate(job.choices):
        prompt = job.prompt_of(i)
        entries = completion_logprob_entries(job, i, c.steps, job.echo)
        choices.append(
            {
                "index": i,
                "text": (prompt.text if job.echo else "") + c.text,
                "logprobs": legacy_logprobs(entries, 0) if job.logprobs is not None else None,
                "finish_reason": c.steps[-1].finish_reason,
                "stop_reason": c.steps[-1].stop_reason,
                "token_ids": c.token_ids if job.token_ids else None,
                "prompt_logprobs": None,
                "prompt_token_ids": prompt.ids if job.token_ids else None,
            }
        )
    head = {"id": job.id, "object": "text_completion", "created": job.created, "model": job.model, "choices": choices}
    tail = {"service_tier": None, "system_fingerprint": None, "usage": job.usage(), "kv_transfer_params": None}
    return head | tail


def chat_body(job: Job) -> JSON:
    choices = []
    for i, c in enumerate(job.choices):
        message: JSON = {"role": job.role, "content": job.echo_text + c.text, "refusal": None, "annotations": None}
        message |= {"audio": None, "function_call": None, "tool_calls": [], "reasoning": None}
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": chat_logprobs(c.logprobs, job.logprobs) if job.logprobs is not None else None,
                "finish_reason": c.steps[-1].finish_reason,
                "stop_reason": c.steps[-1].stop_reason,
                "token_ids": c.token_ids if job.token_ids else None,
            }
        )
    head = {"id": job.id, "object": "chat.completion", "created": job.created, "model": job.model, "choices": choices}
    tail = {"service_tier": None, "system_fingerprint": None, "usage": job.usage(), "prompt_logprobs": None}
    return head | tail | {"prompt_token_ids": job.prompts[0].ids if job.token_ids else None, "kv_transfer_params": None}


@dataclass(frozen=True, slots=True)
class Chunk:
    payload: JSON
    is_token: bool  # counts towards ``reset_after``

    def encode(self) -> bytes:
        return f"data: {dumps(self.payload)}\n\n".encode()


def interleave(job: Job) -> Iterator[tuple[int, int, Step]]:
    """Choice steps in engine order: step t of every choice before step t + 1 of any."""
    for pos in range(max(len(c.steps) for c in job.choices)):
        for i, c in enumerate(job.choices):
            if pos < len(c.steps):
                yield i, pos, c.steps[pos]


def chunk(job: Job, obj: str, choice: JSON, completed: int | None, **extra: Any) -> Chunk:
    """One stream event; ``completed`` is the choice's token count so far (None: not a token chunk)."""
    body = {"id": job.id, "object": obj, "created": job.created, "model": job.model, "choices": [choice]} | extra
    if job.continuous_usage:
        prompt = len(job.prompt_of(choice["index"]).ids)
        done = completed or 0
        body["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt + done, "completion_tokens": done}
    elif job.include_usage:
        # OpenAI's shape; vLLM leaves the key out of these chunks altogether.
        body["usage"] = None
    return Chunk(body, completed is not None)


def usage_chunk(job: Job, obj: str) -> Iterator[Chunk]:
    if job.include_usage:
        head = {"id": job.id, "object": obj, "created": job.created, "model": job.model}
        yield Chunk(head | {"choices": [], "usage": job.usage()}, False)


def completion_chunks(job: Job) -> Iterator[Chunk]:
    offsets = [0] * len(job.choices)
    for i, pos, step in interleave(job):
        prompt, echo = job.prompt_of(i), job.echo and pos == 0
        text = (prompt.text if echo else "") + step.text
        entries = completion_logprob_entries(job, i, [step], echo)
        choice = {
            "index": i,
            "text": text,
            "logprobs": legacy_logprobs(entries, offsets[i]) if job.logprobs is not None else None,
            "finish_reason": step.finish_reason,
            "stop_reason": step.stop_reason,
            "prompt_token_ids": prompt.ids if job.token_ids and pos == 0 else None,
            "token_ids": [step.token_id] if job.token_ids else None,
        }
        offsets[i] += len(text)
        yield chunk(job, "text_completion", choice, pos + 1)
    yield from usage_chunk(job, "text_completion")


def chat_chunks(job: Job) -> Iterator[Chunk]:
    obj, first = "chat.completion.chunk", {"prompt_token_ids": job.prompts[0].ids} if job.token_ids else {}
    for i in range(len(job.choices)):
        delta = {"role": job.role, "content": ""}
        yield chunk(job, obj, {"index": i, "delta": delta, "logprobs": None, "finish_reason": None}, None, **first)
    for i in range(len(job.choices) if job.echo_text else 0):
        yield chunk(
            job, obj, {"index": i, "delta": {"content": job.echo_text}, "logprobs": None, "finish_reason": None}, None
        )
    for i, pos, step in interleave(job):
        lp = (
            chat_logprobs([step.logprob], job.logprobs)
            if step.logprob is not None and job.logprobs is not None
            else None
        )
        choice = {"index": i, "delta": {"content": step.text}, "logprobs": lp, "finish_reason": step.finish_reason}
        choice |= {"stop_reason": step.stop_reason} if step.finish_reason else {}
        yield chunk(job, obj, choice | {"token_ids": [step.token_id] if job.token_ids else None}, pos + 1)
    yield from usage_chunk(job, obj)


# --- faults --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Faults:
    status: int | None = None
    retry_after: str | None = None
    reset_before: bool = False
    reset_after: int | None = None
    error_after: int | None = None
    hang_before: float = 0.0
    gap: float = 0.0  # hang_between + slow: seconds before every stream event after the first


FAULT_KEYS: Final = {
    "status",
    "retry_after",
    "reset_before",
    "reset_after",
    "error_after",
    "hang_before",
    "hang_between",
    "slow",
    "id",
}


def parse_faults(text: str, fired: set[str]) -> Faults:
    """Every ``[[fault:...]]`` marker in ``text``; a ``once:`` marker only the first time it is seen."""
    fields: dict[str, str] = {}
    for match in FAULT_RE.finditer(text):
        if match.group(1):
            if match.group(0) in fired:
                continue
            fired.add(match.group(0))
        for item in filter(None, (part.strip() for part in match.group(2).split(","))):
            key, _, value = item.partition("=")
            fields[key.strip()] = value.strip()
    if unknown := set(fields) - FAULT_KEYS:
        raise ApiError(500, f"fake upstream: unknown fault key(s) {sorted(unknown)} in {text!r}")
    try:
        return Faults(
            status=int(fields["status"]) if "status" in fields else None,
            retry_after=fields.get("retry_after"),
            reset_before="reset_before" in fields,
            reset_after=int(fields["reset_after"]) if "reset_after" in fields else None,
            error_after=int(fields["error_after"]) if "error_after" in fields else None,
            hang_before=float(fields.get("hang_before") or 0),
            gap=float(fields.get("hang_between") or 0) + float(fields.get("slow") or 0),
        )
    except ValueError as exc:
        raise ApiError(500, f"fake upstream: bad fault marker value ({exc})") from None


def marker_text(body: JSON) -> str:
    """Where faults are read from: the prompt text(s), or the last chat message's content."""
    messages = body.get("messages")
    if isinstance(messages, list):
        last = messages[-1] if messages else None
        content = last.get("content") if isinstance(last, dict) else None
        return message_text(content) if isinstance(content, str | list) else ""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else ""


def injected(f: Faults) -> ApiError:
    headers = {"Retry-After": f.retry_after} if f.retry_after else {}
    return ApiError(f.status or 500, f"fake upstream: injected fault (status={f.status})", None, headers)


# --- HTTP ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # parsed JSON, or None when the body was empty or not JSON
    raw: bytes


@dataclass
class UpstreamState:
    """Everything one fake server knows; tests reach it as ``app[STATE]`` or through ``FakeUpstream``."""

    models: tuple[str, ...]
    api_key: str | None
    created: int = field(default_factory=lambda: int(time.time()))
    vocab: Vocabulary = field(default_factory=Vocabulary)
    requests: list[RecordedRequest] = field(default_factory=list)
    cancelled: int = 0
    active: int = 0
    fired_once: set[str] = field(default_factory=set)

    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.models:
            raise ApiError(404, f"The model `{model}` does not exist.", "model")


STATE: Final = web.AppKey("fake_openai_upstream_state", UpstreamState)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def pause(request: web.Request, seconds: float) -> None:
    """Sleep, noticing a client that hangs up meanwhile (vLLM aborts the request then)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not gone(request):
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(left, POLL_SECONDS))
    raise ClientGone


def abort(request: web.Request, response: web.StreamResponse | None = None) -> web.StreamResponse:
    """Drop the TCP connection without a goodbye: no (further) headers, body or ``[DONE]``."""
    if request.transport is not None:
        request.transport.abort()
    return response if response is not None else web.Response()


def try_json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


@web.middleware
async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
    raw = await request.read()
    headers = {k.lower(): v for k, v in request.headers.items()}
    request.app[STATE].requests.append(RecordedRequest(request.method, request.path, headers, try_json(raw), raw))
    return await handler(request)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Like vLLM's ``--api-key``, only ``/v1`` paths are guarded; the body is OpenAI's, not vLLM's."""
    key = request.app[STATE].api_key
    sent = request.headers.get("Authorization", "")
    if key is None or not request.path.startswith("/v1") or hmac.compare_digest(sent, f"Bearer {key}"):
        return await handler(request)
    error = {"message": "Incorrect API key provided.", "type": "invalid_request_error", "param": None}
    return web.json_response({"error": error | {"code": "invalid_api_key"}}, status=401, dumps=dumps)


@web.middleware
async def envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors into vLLM's envelope; in-flight and hung-up counts for generation requests."""
    state, counted = request.app[STATE], request.path in GENERATION_PATHS
    state.active += int(counted)
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except (ClientGone, asyncio.CancelledError) as exc:
        state.cancelled += int(counted)
        if isinstance(exc, asyncio.CancelledError):
            raise
        return web.Response()
    finally:
        state.active -= int(counted)


async def json_body(request: web.Request) -> JSON:
    try:
        body = json.loads(await request.read())
    except ValueError as exc:
        raise ApiError(400, f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Input should be a valid dictionary or object to extract fields from", None)
    return body


async def stream(request: web.Request, faults: Faults, chunks: Iterator[Chunk]) -> web.StreamResponse:
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    response, tokens_sent = web.StreamResponse(headers=headers), 0
    try:
        await response.prepare(request)
        for n, item in enumerate(chunks):
            await pause(request, faults.gap if n else 0)
            await response.write(item.encode())
            tokens_sent += item.is_token
            if faults.reset_after is not None and tokens_sent >= faults.reset_after:
                return abort(request, response)
            if faults.error_after is not None and tokens_sent >= faults.error_after:
                break
        if faults.reset_after is not None:
            return abort(request, response)
        await pause(request, faults.gap)
        if faults.error_after is not None:
            await response.write(STREAM_ERROR)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except (ConnectionError, ClientGone):
        request.app[STATE].cancelled += 1
    return response


# vLLM's create_streaming_error_response: the error envelope as one more event, then [DONE].
STREAM_ERROR: Final = f"data: {dumps(ApiError(500, 'fake upstream: injected stream error').envelope())}\n\n".encode()


def generation_handler(
    build: Callable[[UpstreamState, JSON, str], Job],
    render: Callable[[Job], JSON],
    chunks: Callable[[Job], Iterator[Chunk]],
) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        body = await json_body(request)
        faults = parse_faults(marker_text(body), state.fired_once)
        await pause(request, faults.hang_before)
        if faults.reset_before:
            return abort(request)
        if faults.status is not None:
            raise injected(faults)
        # vLLM bases the response id on X-Request-Id when the client sends one.
        job = build(state, body, request.headers.get("X-Request-Id") or uuid.uuid4().hex)
        if job.stream:
            return await stream(request, faults, chunks(job))
        await pause(request, faults.gap * max(len(c.steps) for c in job.choices))
        return abort(request) if faults.reset_after is not None else web.json_response(render(job), dumps=dumps)

    return handle


async def health(request: web.Request) -> web.Response:
    return web.Response()


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    permission = {"object": "model_permission", "created": state.created, "allow_create_engine": False}
    permission |= {"allow_sampling": True, "allow_logprobs": True, "allow_view": True, "organization": "*"}
    cards = [
        {"id": m, "object": "model", "created": state.created, "owned_by": "vllm", "root": m, "parent": None}
        | {"max_model_len": MAX_MODEL_LEN, "permission": [{"id": f"modelperm-{m}"} | permission]}
        for m in state.models
    ]
    return web.json_response({"object": "list", "data": cards}, dumps=dumps)


async def tokenize_endpoint(request: web.Request) -> web.Response:
    state = request.app[STATE]
    req = parse(TokenizeRequest, await json_body(request))
    state.check_model(req.model)
    if req.prompt is None and req.messages is None:
        raise invalid("Either prompt or messages must be provided.", "prompt")
    text = req.prompt if req.prompt is not None else render_chat(req.messages or [])
    ids = state.vocab.encode(text)
    strs = [state.vocab.token(t) for t in ids] if req.return_token_strs else None
    return web.json_response(
        {"count": len(ids), "max_model_len": MAX_MODEL_LEN, "tokens": ids, "token_strs": strs}, dumps=dumps
    )


async def detokenize_endpoint(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await json_body(request)
    state.check_model(body.get("model"))
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise invalid("tokens must be a list of token ids", "tokens")
    return web.json_response({"prompt": state.vocab.decode(tokens)}, dumps=dumps)


async def metrics(request: web.Request) -> web.Response:
    """The three load gauges a router scrapes (vLLM's names)."""
    state = request.app[STATE]
    lines = []
    for name, value in (
        ("num_requests_running", state.active),
        ("num_requests_waiting", 0),
        ("kv_cache_usage_perc", 0.0),
    ):
        lines += [f"# TYPE vllm:{name} gauge"] + [
            f'vllm:{name}{{engine="0",model_name="{m}"}} {value}' for m in state.models
        ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def create_app(models: Sequence[str] = ("tiny",), api_key: str | None = None) -> web.Application:
    app = web.Application(middlewares=[record, authenticate, envelope], client_max_size=64 * 2**20)
    app[STATE] = UpstreamState(models=tuple(models), api_key=api_key)
    app.router.add_routes(
        [
            web.get("/health", health),
            web.get("/metrics", metrics),
            web.get("/v1/models", list_models),
            web.post("/v1/completions", generation_handler(completion_job, completion_body, completion_chunks)),
            web.post("/v1/chat/completions", generation_handler(chat_job, chat_body, chat_chunks)),
            web.post("/tokenize", tokenize_endpoint),
            web.post("/detokenize", detokenize_endpoint),
        ]
    )
    return app


# --- running -------------------------------------------------------------------------------------


class FakeUpstream:
    """A started fake: ``url`` ends in ``/v1`` (the adapter's base URL); ``origin`` does not."""

    def __init__(self, runner: web.AppRunner, origin: str) -> None:
        self._runner = runner
        self.origin = origin
        self.url = origin + "/v1"
        self.state = runner.app[STATE]

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.state.requests

    @property
    def cancelled(self) -> int:
        return self.state.cancelled

    @property
    def active(self) -> int:
        return self.state.active

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> FakeUpstream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def start_upstream(
    models: Sequence[str] = ("tiny",), api_key: str | None = None, host: str = "127.0.0.1", port: int = 0
) -> FakeUpstream:
    # handler_cancellation: like vLLM, a request whose client hangs up is abandoned, not finished.
    runner = web.AppRunner(
        create_app(models, api_key), handler_cancellation=True, shutdown_timeout=1.0, access_log=None
    )
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return FakeUpstream(runner, f"http://{shown}:{bound_port}")


async def serve(args: argparse.Namespace) -> None:
    upstream = await start_upstream(args.model or ("tiny",), args.api_key, args.host, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {upstream.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await upstream.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible (vLLM-flavoured) upstream for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port; the READY line shows it")
    parser.add_argument("--model", action="append", help="served model name (repeatable; default: tiny)")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 paths")
    asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()

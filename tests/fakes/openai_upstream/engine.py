"""The deterministic "model": choices generated from (prompt, seed, index), and jobs (a validated request
with its generated choices)."""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.fakes.openai_upstream.bodies import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Knobs,
    Sampling,
    StreamOptions,
    build_sampling,
    check_logprobs,
    check_request_level,
    parse,
)
from tests.fakes.openai_upstream.common import (
    EOS_TOKEN,
    JSON,
    MAX_MODEL_LEN,
    NATURAL_LENGTH,
    VOCAB,
    VOCAB_SIZE,
    Vocabulary,
    invalid,
    token_id,
    tokenize,
)

if TYPE_CHECKING:  # the server imports the jobs; the jobs only name its state
    from tests.fakes.openai_upstream.server import UpstreamState

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

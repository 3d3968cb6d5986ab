"""The one deterministic "model" every wire of the fake answers from: vocabulary, tokenizer, token ids
and the decoding of one choice (stops, lengths, EOS, logprobs). Nothing of HTTP or of any vendor's shape.

A token is a word with its leading whitespace; its id is ``crc32(word) % 32000``. The answer is a
pseudo-random sequence of ``VOCAB`` words seeded by (prompt key, ``seed``, choice index); after
``NATURAL_LENGTH`` words the model emits EOS (id 2, ``</s>``), which, as in vLLM, counts as a completion
token and appears in ``token_ids`` but not in the text.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

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
TOKEN_RE: Final = re.compile(r"\s*\S+|\s+")


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


@dataclass(frozen=True, slots=True)
class Sampling:
    """The knobs one choice is decoded with, after the request's checks."""

    max_tokens: int
    min_tokens: int = 0
    greedy: bool = False
    seed: int | None = None
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    include_stop: bool = False
    bad_words: frozenset[str] = frozenset()
    logprobs: int | None = None  # alternatives per token; None when not asked
    forced: str | None = None  # the text structured outputs pin the answer to


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
    limit = s.max_tokens  # the request checks have fitted it into the context
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


def expected(prompt: str, max_tokens: int = 16, index: int = 0, seed: int | None = None) -> str:
    """The text a plain request for ``prompt`` gets (the prompt key: the completion prompt, or the last chat
    message's text), for tests that check what came through the gateway."""
    return generate(prompt, 0, Sampling(max_tokens=max_tokens, seed=seed), index).text

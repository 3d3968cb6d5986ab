"""The mock provider's words, sans-IO: its tokenizer, the answer it writes for a prompt and seed, and
the error a prompt asks for. Pure functions of their arguments; ``engine.py`` paces and sends them.

The tokenizer: a token is a run of letters, digits and underscores, or any one other visible
character, with the whitespace before it (``\\s*(?:\\w+|[^\\w\\s])``); whitespace at the very end is
no token. ``"Hello, world!"`` is four tokens. A token-id prompt counts its ids.

What does not belong here: timing, the request pipeline, any wire format.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.mock.tools import thinks
from gateway.core.errors import GatewayError, UpstreamFailed, UpstreamRejected, UpstreamTimeout
from gateway.core.request import ChatMessage, InternalRequest, PromptItem
from gateway.core.response import FinishReason

TOKEN = re.compile(r"\s*(?:\w+|[^\w\s])")
ERROR_MARKER = re.compile(r"\[mock-error (\d{3})(?: after (\d+))?\]")
# The natural answer (no max_tokens) ends with the first sentence end at or past this many tokens,
# drawn per choice: long enough to watch stream, short enough not to wait on.
NATURAL_TOKENS = (16, 48)
WORDS = (
    "the", "gateway", "routes", "each", "request", "to", "a", "model", "that", "can", "serve", "it",
    "tokens", "stream", "back", "as", "they", "are", "made", "and", "every", "answer", "counts", "its",
    "usage", "limits", "keep", "teams", "within", "their", "budget", "while", "metrics", "show", "how",
    "fast", "replies", "arrive", "this", "mock", "writes", "plain", "words", "so", "you", "see", "text",
    "move", "through", "pipeline", "without", "any", "real", "engine", "behind", "same", "prompt",
    "seed", "gives", "reply", "again", "quietly", "clearly", "today",
)  # fmt: skip


def count_tokens(text: str) -> int:
    return len(TOKEN.findall(text))


def content_text(content: str | tuple[object, ...] | None) -> str:
    """A chat message's text: the string, or its ``text`` parts joined (images and audio count nothing)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = [p.get("text") for p in content if isinstance(p, dict)]
    return " ".join(p for p in parts if isinstance(p, str))


def prompt_tokens(item: PromptItem) -> int:
    return len(item) if isinstance(item, tuple) else count_tokens(item)


def chat_tokens(messages: Sequence[ChatMessage]) -> int:
    """Each message counts its role as one token, plus its text's tokens."""
    return sum(1 + count_tokens(content_text(m.content)) for m in messages)


def prompt_key(item: PromptItem | Sequence[ChatMessage]) -> str:
    """The text an answer is drawn from: a prompt, or a conversation's roles and texts."""
    if isinstance(item, str):
        return item
    if isinstance(item, tuple) and all(isinstance(t, int) for t in item):
        return " ".join(map(str, item))
    return "\n".join(f"{m.role}: {content_text(m.content)}" for m in item if isinstance(m, ChatMessage))


def _words(rng: random.Random) -> Iterator[tuple[str, bool]]:
    """(token, ends a sentence): sentences of 4 to 12 words, forever; each word one token, each full
    stop one more."""
    first = True
    while True:
        for i in range(rng.randint(4, 12)):
            word = rng.choice(WORDS)
            yield (("" if first else " ") + (word.capitalize() if i == 0 else word)), False
            first = False
        yield ".", True


@dataclass(slots=True)
class Answer:
    """One choice as written: its tokens' texts (a stop string may have cut the last ones to ``""``),
    and why it ended; the thinking's tokens before them; a tool call, the answer's only output (its
    arguments' tokens are ``pieces`` of no text). ``tokens`` is the completion's token count."""

    pieces: list[str]
    reason: FinishReason
    thought: list[str] = field(default_factory=list)
    call: tuple[str, str] | None = None  # (name, arguments as JSON)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def tokens(self) -> int:
        return len(self.thought) + len(self.pieces)


def calling(name: str, arguments: dict[str, Any]) -> Answer:
    """An answer that is one call of tool ``name``: its arguments' tokens counted, no text."""
    encoded = json.dumps(arguments, separators=(",", ":"))
    return Answer([""] * max(1, count_tokens(encoded)), "tool_calls", call=(name, encoded))


def thought(key: str, seed: int | None, index: int, budget: int) -> list[str]:
    """What the mock thinks before answering: one sentence drawn as the answer is, within ``budget``."""
    rng = random.Random(hashlib.sha256(f"thinking\x00{seed}\x00{index}\x00{key}".encode()).digest())
    pieces: list[str] = []
    for piece, sentence_end in _words(rng):
        pieces.append(piece)
        if sentence_end or len(pieces) >= budget:
            return pieces
    return pieces  # pragma: no cover  (the words never run out)


def write(key: str, seed: int | None, index: int, request: InternalRequest) -> Answer:
    """The answer to prompt ``key`` for choice ``index`` with ``seed``: always the same for the same three.

    It ends at its natural end (``stop``; ``ignore_eos`` and ``min_tokens`` write on), at
    ``max_tokens`` (``length``) or where a stop string first appears (``stop``; the text ends before
    it, or after it with ``include_stop_str_in_output``; the token that completed it is counted)."""
    sampling = request.sampling
    digest = hashlib.sha256(f"{seed}\x00{index}\x00{key}".encode()).digest()
    rng = random.Random(digest)
    natural = rng.randint(*NATURAL_TOKENS)
    budget = thinks(request)
    thinking = thought(key, seed, index, budget) if budget else []
    limit = sampling.max_tokens if sampling.max_tokens is None else max(1, sampling.max_tokens - len(thinking))
    floor = sampling.min_tokens or 0
    pieces: list[str] = []
    reason: FinishReason = "stop"
    text = ""
    words = _words(rng)
    while True:
        if limit is not None and len(pieces) >= limit:
            reason = "length"
            break
        piece, sentence_end = next(words)
        start = len(text)
        pieces.append(piece)
        text += piece
        cut = _stop_at(text, sampling.stop, start, sampling.include_stop_str_in_output)
        if cut is not None:
            # The stop string is not part of the answer: the pieces are cut back to where it began.
            text = text[:cut]
            kept = 0
            for i, p in enumerate(pieces):
                pieces[i] = p[: max(0, cut - kept)]
                kept += len(p)
            reason = "stop"
            break
        if sentence_end and len(pieces) >= max(natural, floor) and not sampling.ignore_eos:
            break
    return Answer(pieces, reason, thinking)


def _stop_at(text: str, stops: Sequence[str], since: int, include: bool) -> int | None:
    """Where the answer ends if the last piece (from ``since``) completed a stop string, else None."""
    best: int | None = None
    for stop in stops:
        if not stop:
            continue
        at = text.find(stop, max(0, since - len(stop) + 1))
        if at != -1:
            end = at + len(stop) if include else at
            best = end if best is None else min(best, end)
    return best


def asked_error(key: str, target: str) -> tuple[GatewayError, int] | None:
    """The error a ``[mock-error STATUS]`` or ``[mock-error STATUS after N]`` marker asks for, and
    after how many streamed tokens it comes (0: before the first byte)."""
    found = ERROR_MARKER.search(key)
    if found is None:
        return None
    status, after = int(found.group(1)), int(found.group(2) or 0)
    why = f"target '{target}': failed as its prompt asked ({found.group(0)})"
    err: GatewayError
    if status == 504:
        err = UpstreamTimeout(why)
    elif 400 <= status < 500:
        err = UpstreamRejected(why, status=status)
    else:
        err = UpstreamFailed(why)
    return err, after

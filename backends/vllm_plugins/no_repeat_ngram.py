"""No-repeat-n-gram blocking for Friendli's ``no_repeat_ngram`` field.

``vllm_xargs: {"no_repeat_ngram_size": N}``: no n-gram of N tokens occurs twice in prompt + output
(Hugging Face's ``no_repeat_ngram_size`` for decoder-only models). At each step, every token that
would complete an N-gram already present is banned (logit -inf). N of 0 or 1 is off, as Friendli's
``1 = off``; anything but a non-negative integer is rejected (HTTP 400).

The n-grams are indexed incrementally (each position once), so a step costs O(N) besides the ban.
For a prompt given only as embeddings (no prompt ids), only the output's n-grams are considered.
"""

from __future__ import annotations

from typing import Any

import torch

from backends.vllm_plugins.common import PromptAwareAdapter, is_int, reject, xarg

KEY = "no_repeat_ngram_size"


class _NoRepeatNGram:
    def __init__(self, n: int) -> None:
        self.n = n
        self.next_tokens: dict[tuple[int, ...], set[int]] = {}
        self.indexed = 0  # n-grams starting before this position are in next_tokens

    def __call__(self, prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        n, p = self.n, len(prompt_ids)
        total = p + len(output_ids)

        def at(i: int) -> int:
            return prompt_ids[i] if i < p else output_ids[i - p]

        if total < self.indexed + n - 1:  # the sequence shrank (never in practice): start over
            self.next_tokens.clear()
            self.indexed = 0
        for start in range(self.indexed, total - n + 1):
            head = tuple(at(i) for i in range(start, start + n - 1))
            self.next_tokens.setdefault(head, set()).add(at(start + n - 1))
        self.indexed = max(self.indexed, total - n + 1)
        if total >= n - 1:
            banned = self.next_tokens.get(tuple(at(i) for i in range(total - n + 1, total)))
            if banned:
                logits[list(banned)] = float("-inf")
        return logits


class NoRepeatNGramLogitsProcessor(PromptAwareAdapter):
    """Bans tokens that would repeat an n-gram of ``extra_args["no_repeat_ngram_size"]`` tokens."""

    @classmethod
    def validate_params(cls, params: Any) -> None:
        n = xarg(params, KEY)
        if n is not None and not (is_int(n) and n >= 0):
            raise reject(KEY, n, "must be a non-negative integer (0 and 1 mean off)")

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token is the most likely

    def new_req_logits_processor(self, params: Any) -> _NoRepeatNGram | None:
        n = xarg(params, KEY)
        return _NoRepeatNGram(n) if n is not None and n > 1 else None

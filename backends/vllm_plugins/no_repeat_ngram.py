"""Friendli ``no_repeat_ngram``: no n-gram of size N appears twice in prompt + output
(``vllm_xargs: {"no_repeat_ngram_size": N}``; N <= 1 is off, as in Friendli)."""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from backends.vllm_plugins import arg

KEY = "no_repeat_ngram_size"


class _Ban:
    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        seq = prompt_ids + output_ids
        n = self.n
        if len(seq) < n - 1:
            return logits
        prefix = tuple(seq[len(seq) - n + 1 :])
        banned = {seq[i + n - 1] for i in range(len(seq) - n + 1) if tuple(seq[i : i + n - 1]) == prefix}
        if banned:
            logits[list(banned)] = float("-inf")
        return logits


class NoRepeatNGramLogitsProcessor(AdapterLogitsProcessor):  # type: ignore[misc]
    @classmethod
    def validate_params(cls, params: Any) -> None:
        n = arg(params, KEY)
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"{KEY} must be a positive integer, got {n!r}")

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> _Ban | None:
        n = arg(params, KEY)
        return _Ban(n) if n and n > 1 else None

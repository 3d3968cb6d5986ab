"""Banned token sequences for Friendli's ``bad_word_tokens`` (Hugging Face's ``bad_words_ids``).

``vllm_xargs: {"bad_word_tokens": [id, ..., -1, id, ...]}`` (sequences separated by -1: vLLM's
``vllm_xargs`` takes flat lists only): for a sequence of N tokens, when the output
ends with its first N - 1 tokens, its last token is banned (logit -inf), so the sequence never
appears in the output; a one-token sequence is banned everywhere. As Friendli's page says, only the
generated result is matched, not the prompt. vLLM's own ``bad_words`` takes text, tokenized with and
without a leading space, and cannot take token ids.

An empty list is off; an empty sequence or an id that is not a non-negative integer is rejected
(HTTP 400). An id beyond the model's logits is never generated, so a sequence ending in one is
skipped.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from backends.vllm_plugins.common import check_sequences, token_sequences, xarg

KEY = "bad_word_tokens"


class _Ban:
    def __init__(self, sequences: list[list[int]]) -> None:
        self.always = sorted({seq[0] for seq in sequences if len(seq) == 1})
        # last token by the N - 1 tokens before it
        self.after: dict[tuple[int, ...], set[int]] = {}
        for seq in sequences:
            if len(seq) > 1:
                self.after.setdefault(tuple(seq[:-1]), set()).add(seq[-1])
        self.lengths = sorted({len(head) for head in self.after})

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        banned = set(self.always)
        for n in self.lengths:
            if n <= len(output_ids):
                banned |= self.after.get(tuple(output_ids[len(output_ids) - n :]), set())
        width = logits.shape[-1]
        ids = [t for t in banned if t < width]
        if ids:
            logits[ids] = float("-inf")
        return logits


class BadWordTokensLogitsProcessor(AdapterLogitsProcessor):
    """Bans every token sequence in ``extra_args["bad_word_tokens"]`` from the output."""

    @classmethod
    def validate_params(cls, params: Any) -> None:
        check_sequences(params, KEY)

    def is_argmax_invariant(self) -> bool:
        return False  # it bans tokens, the most likely among them

    def new_req_logits_processor(self, params: Any) -> _Ban | None:
        value = xarg(params, KEY)
        return _Ban(token_sequences(value) or []) if value else None

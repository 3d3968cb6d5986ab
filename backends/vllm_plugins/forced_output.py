"""Forced output for Friendli's ``forced_output_tokens`` (multiple-choice evaluation).

``vllm_xargs: {"forced_output_tokens": [id0, id1, ...]}``: the i-th generated token is ``ids[i]``
while i < len(ids): every other logit becomes -inf (the forced one keeps its value, or 0 when it was
not finite, e.g. already banned by ``bad_words``: forcing wins). Afterwards generation is free. Clients ask
for ``logprobs`` as well: vLLM computes those from the raw logits (``--logprobs-mode raw_logprobs``,
the default), so they are the model's own probabilities of the forced tokens, which is what the
evaluation reads. ``max_tokens`` still bounds the output, and a forced EOS / stop token still stops it.

An empty list is off; anything but a list of non-negative integers is rejected (HTTP 400). The
vocabulary is not known where parameters are validated, so an id beyond the model's logits is
skipped at its step (nothing forced there) rather than failing inside the engine; the gateway
should check ids against the model's vocabulary.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from backends.vllm_plugins.common import is_int, reject, xarg

KEY = "forced_output_tokens"


class _Force:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        step = len(output_ids)
        if step >= len(self.ids) or self.ids[step] >= logits.shape[-1]:
            return logits
        token = self.ids[step]
        value = logits[token].item()
        logits.fill_(float("-inf"))
        logits[token] = value if math.isfinite(value) else 0.0
        return logits


class ForcedOutputLogitsProcessor(AdapterLogitsProcessor):
    """Forces the first ``len(extra_args["forced_output_tokens"])`` generated tokens."""

    @classmethod
    def validate_params(cls, params: Any) -> None:
        ids = xarg(params, KEY)
        if ids is not None and not (isinstance(ids, list) and all(is_int(i) and i >= 0 for i in ids)):
            raise reject(KEY, ids, "must be a list of token ids (non-negative integers)")

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the token outright

    def new_req_logits_processor(self, params: Any) -> _Force | None:
        ids = xarg(params, KEY)
        return _Force(list(ids)) if ids else None

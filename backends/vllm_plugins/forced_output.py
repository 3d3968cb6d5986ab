"""Friendli ``forced_output_tokens``: the i-th generated token is forced to ids[i] while i < len(ids)
(multiple-choice evaluation; the client reads the logprobs of the forced tokens).
``vllm_xargs: {"forced_output_tokens": [ids...]}``."""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from backends.vllm_plugins import arg

KEY = "forced_output_tokens"


class _Force:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        step = len(output_ids)
        if step < len(self.ids):
            keep = logits[self.ids[step]].clone()
            logits.fill_(float("-inf"))
            logits[self.ids[step]] = keep if torch.isfinite(keep) else 0.0
        return logits


class ForcedOutputLogitsProcessor(AdapterLogitsProcessor):  # type: ignore[misc]
    @classmethod
    def validate_params(cls, params: Any) -> None:
        ids = arg(params, KEY)
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids)):
            raise ValueError(f"{KEY} must be a list of token ids")

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> _Force | None:
        ids = arg(params, KEY)
        return _Force(list(ids)) if ids else None

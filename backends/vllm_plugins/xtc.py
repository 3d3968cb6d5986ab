"""Friendli XTC (Exclude Top Choices): with probability ``xtc_probability``, every token whose
probability is at least ``xtc_threshold`` is removed except the least likely of them.
``vllm_xargs: {"xtc_threshold": t, "xtc_probability": p}``.

Ordering: vLLM's V1 sampler runs custom processors before temperature (vllm.md §1), so probabilities
here are those of the raw logits, not llama.cpp's post-temperature ones: an approximation that is
exact at temperature 1. The coin is a per-request generator seeded from the request's seed when
given, so seeded requests are reproducible."""

from __future__ import annotations

import random
from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from backends.vllm_plugins import arg


class _XTC:
    def __init__(self, threshold: float, probability: float, seed: int | None) -> None:
        self.threshold = threshold
        self.probability = probability
        self.rng = random.Random(seed)

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        if self.rng.random() >= self.probability:
            return logits
        probs = torch.softmax(logits.float(), dim=-1)
        viable = torch.nonzero(probs >= self.threshold).flatten()
        if viable.numel() < 2:
            return logits
        keep = viable[torch.argmin(probs[viable])]
        drop = viable[viable != keep]
        logits[drop] = float("-inf")
        return logits


class XTCLogitsProcessor(AdapterLogitsProcessor):  # type: ignore[misc]
    @classmethod
    def validate_params(cls, params: Any) -> None:
        for name in ("xtc_threshold", "xtc_probability"):
            value = arg(params, name)
            if value is not None and (not isinstance(value, int | float) or not 0 <= value <= 1):
                raise ValueError(f"{name} must be within [0, 1], got {value!r}")

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> _XTC | None:
        probability = arg(params, "xtc_probability") or 0.0
        if probability <= 0:
            return None
        return _XTC(float(arg(params, "xtc_threshold") or 0.0), float(probability), params.seed)

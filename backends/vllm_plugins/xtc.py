"""XTC ("Exclude Top Choices") sampling for Friendli's ``xtc_threshold`` / ``xtc_probability``.

``vllm_xargs: {"xtc_threshold": t, "xtc_probability": p}``, both within [0, 1]. At each step, with
probability ``p``, every token whose probability is at least ``t`` is removed (logit -inf) except the
least likely of them, so the most predictable continuations give way to the least predictable
"viable" one; fewer than two such tokens means nothing changes (so ``t`` above 0.5 never acts).
Only tokens still possible (finite logit) count. ``p`` of 0 (or no ``p``) is off; ``t`` is taken
literally, so with ``t`` = 0 every possible token is viable and only the least likely one survives
(Friendli documents its default ``t`` of 0.0 as "off": the gateway should only send XTC when both are
positive).

The coin: per request and step, from a generator seeded with ``(seed, step)`` when the request has a
``seed`` (reproducible, and unaffected by the request leaving and re-entering the batch), otherwise
from a per-request generator seeded from the OS.

Ordering approximation: llama.cpp applies XTC to the probabilities after temperature (and after its
earlier samplers). vLLM's V1 sampler runs custom non-argmax-invariant processors before penalties and
temperature (allowed ids -> bad words -> these -> penalties -> temperature -> min_p -> top-k/top-p),
so here the probabilities are the softmax of the raw logits (after bad words and logit bias): exact
at temperature 1 without penalties, an approximation otherwise. It also acts on greedy requests.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from backends.vllm_plugins.common import is_number, reject, xarg

THRESHOLD = "xtc_threshold"
PROBABILITY = "xtc_probability"


class _XTC:
    def __init__(self, threshold: float, probability: float, seed: int | None) -> None:
        self.threshold = threshold
        self.probability = probability
        self.seed = seed
        self.rng = random.Random()  # unseeded requests: seeded from the OS

    def coin(self, step: int) -> float:
        if self.seed is None:
            return self.rng.random()
        return random.Random(hash((self.seed, step))).random()

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        if self.coin(len(output_ids)) >= self.probability:
            return logits
        probs = torch.softmax(logits, dim=-1)
        viable = torch.nonzero((probs >= self.threshold) & torch.isfinite(logits)).flatten()
        if viable.numel() < 2:
            return logits
        keep = viable[torch.argmin(probs[viable])]
        logits[viable[viable != keep]] = float("-inf")
        return logits


class XTCLogitsProcessor(AdapterLogitsProcessor):
    """Exclude Top Choices, on when ``extra_args["xtc_probability"]`` > 0."""

    @classmethod
    def validate_params(cls, params: Any) -> None:
        for key in (THRESHOLD, PROBABILITY):
            value = xarg(params, key)
            if value is not None and not (is_number(value) and 0 <= value <= 1):
                raise reject(key, value, "must be a number within [0, 1]")

    def is_argmax_invariant(self) -> bool:
        return False  # it removes the most likely tokens

    def new_req_logits_processor(self, params: Any) -> _XTC | None:
        probability = xarg(params, PROBABILITY)
        if not probability:
            return None
        threshold = xarg(params, THRESHOLD)
        return _XTC(float(threshold or 0.0), float(probability), params.seed)

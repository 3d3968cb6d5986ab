"""Friendli ``min_total_tokens`` / ``max_total_tokens``: bounds on prompt + output length.
``vllm_xargs: {"min_total_tokens": a, "max_total_tokens": b}``. Below ``a`` the EOS token is banned;
at ``b - 1`` only EOS may follow, so generation ends with exactly ``b`` tokens in all. The EOS id is
the model's own (``hf_config.eos_token_id``, read once when vLLM builds the processor)."""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from backends.vllm_plugins import arg


def eos_ids(vllm_config: Any) -> list[int]:
    eos = getattr(vllm_config.model_config.hf_config, "eos_token_id", None)
    if eos is None:
        return []
    return list(eos) if isinstance(eos, list | tuple) else [int(eos)]


class _Bounds:
    def __init__(self, low: int | None, high: int | None, eos: list[int]) -> None:
        self.low, self.high, self.eos = low, high, eos

    def __call__(self, prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        total = len(prompt_ids) + len(output_ids)
        if self.high is not None and total >= self.high - 1 and self.eos:
            keep = logits[self.eos].clone()
            logits.fill_(float("-inf"))
            logits[self.eos] = torch.where(torch.isfinite(keep), keep, torch.zeros_like(keep))
        elif self.low is not None and total < self.low and self.eos:
            logits[self.eos] = float("-inf")
        return logits


class TotalLengthLogitsProcessor(AdapterLogitsProcessor):  # type: ignore[misc]
    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        self.eos = eos_ids(vllm_config)

    @classmethod
    def validate_params(cls, params: Any) -> None:
        low, high = arg(params, "min_total_tokens"), arg(params, "max_total_tokens")
        for name, value in (("min_total_tokens", low), ("max_total_tokens", high)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if low is not None and high is not None and low > high:
            raise ValueError("min_total_tokens exceeds max_total_tokens")

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any) -> _Bounds | None:
        low, high = arg(params, "min_total_tokens"), arg(params, "max_total_tokens")
        if low is None and high is None:
            return None
        return _Bounds(low, high, self.eos)

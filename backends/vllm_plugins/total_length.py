"""Prompt + output length bounds for Friendli's ``min_total_tokens`` / ``max_total_tokens``.

``vllm_xargs: {"min_total_tokens": a, "max_total_tokens": b}`` (either or both; positive integers,
a <= b), counting prompt and output tokens together like Hugging Face's ``min_length`` / ``max_length``:

* while prompt + output < a, every stop token (below) is banned, so generation cannot end there;
* once prompt + output >= b - 1, only the end token may follow, so generation ends with exactly b
  tokens in all (prompt + completion, the EOS counted as vLLM counts it in ``completion_tokens``),
  unless it ended earlier on its own. If the prompt alone is b - 1 tokens or more, the first token is
  the end token.

vLLM's own ``max_tokens`` still applies on top: send ``max_tokens`` >= b - prompt length, or null (then
vLLM allows ``max_model_len`` - prompt length); the HTTP completions default of 16 would cut earlier.

Finding EOS. Per request, from the ``SamplingParams`` vLLM's input processor prepared before the
request reached the engine: ``params.eos_token_id`` is the tokenizer's EOS (the id vLLM itself stops
on; None under ``ignore_eos``), and ``params.all_stop_token_ids`` is that EOS plus the model's
``generation_config.json`` EOS ids plus the request's ``stop_token_ids`` (the set vLLM's own
``min_tokens`` bans). As a fallback, ``vllm_config.model_config.hf_text_config.eos_token_id`` (the
model config's EOS, an id or a list), read once when vLLM builds the processor; the engine process
holds no tokenizer to ask. The end token forced at b - 1 is ``params.eos_token_id``; without it (a
request not prepared by the input processor) the config's EOS; under ``ignore_eos`` the request's
``stop_token_ids`` (EOS would not stop it); with none of these nothing is forced. The tokens banned
below a are ``all_stop_token_ids`` plus the config's EOS.

A prompt given only as embeddings carries no prompt ids, so its length is unknown here: such requests
are left alone (a warning is logged); the gateway, which knows the embedding count, should turn the
bounds into ``min_tokens`` / ``max_tokens`` itself.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from backends.vllm_plugins.common import PromptAwareAdapter, config_eos_ids, end_tokens, is_int, reject, xarg

LOW = "min_total_tokens"
HIGH = "max_total_tokens"
log = logging.getLogger(__name__)


class _Bounds:
    def __init__(self, low: int | None, high: int | None, end: list[int], stops: list[int]) -> None:
        self.low, self.high, self.end, self.stops = low, high, end, stops
        self.warned = False

    def __call__(self, prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        if not prompt_ids:  # prompt given as embeddings only: length unknown
            if not self.warned:
                log.warning("%s/%s ignored: the prompt has no token ids (embeddings only)", LOW, HIGH)
                self.warned = True
            return logits
        total = len(prompt_ids) + len(output_ids)
        if self.high is not None and total >= self.high - 1 and self.end:
            kept = [(t, logits[t].item()) for t in self.end if t < logits.shape[-1]]
            if kept:
                logits.fill_(float("-inf"))
                for token, value in kept:
                    logits[token] = value if math.isfinite(value) else 0.0
        elif self.low is not None and total < self.low and self.stops:
            logits[self.stops] = float("-inf")
        return logits


class TotalLengthLogitsProcessor(PromptAwareAdapter):
    """Bounds prompt + output length by ``extra_args["min_total_tokens"/"max_total_tokens"]``."""

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        self.config_eos = config_eos_ids(vllm_config)
        self.vocab = vllm_config.model_config.get_vocab_size()

    @classmethod
    def validate_params(cls, params: Any) -> None:
        low, high = xarg(params, LOW), xarg(params, HIGH)
        for key, value in ((LOW, low), (HIGH, high)):
            if value is not None and not (is_int(value) and value >= 1):
                raise reject(key, value, "must be a positive integer")
        if low is not None and high is not None and low > high:
            raise reject(LOW, low, f"must not exceed {HIGH} ({high})")

    def is_argmax_invariant(self) -> bool:
        return False  # it bans or forces the end token

    def new_req_logits_processor(self, params: Any) -> _Bounds | None:
        low, high = xarg(params, LOW), xarg(params, HIGH)
        if low is None and high is None:
            return None
        stops = sorted(t for t in set(params.all_stop_token_ids) | set(self.config_eos) if 0 <= t < self.vocab)
        return _Bounds(low, high, end_tokens(params, self.config_eos), stops)

"""Multi-token stops for Friendli's ``stop_tokens`` (sequences of more than one token).

``vllm_xargs: {"stop_token_sequences": [id, ..., -1, id, ...]}`` (sequences separated by -1, as in
``bad_word_tokens``): once the output ends with one of the
sequences, the end token is the only one left, so generation stops there with finish reason
``stop``; the sequence stays in the output (as a single-token stop in ``stop_token_ids`` does), the end
token is not shown as text. vLLM's own ``stop_token_ids`` take single tokens only (the gateway sends
one-token sequences there) and its ``stop`` takes text.

The end token is the one ``total_length`` forces (``common.end_tokens``): the request's EOS, or the
model config's, or under ``ignore_eos`` the request's ``stop_token_ids``; with none, nothing is
forced. While ``min_tokens`` is not reached the stop waits, as vLLM's own stops do (vLLM bans the
end token then, and a row with every logit banned cannot be sampled).

An empty list is off; an empty sequence or an id that is not a non-negative integer is rejected
(HTTP 400).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from backends.vllm_plugins.common import check_sequences, config_eos_ids, end_tokens, token_sequences, xarg

KEY = "stop_token_sequences"


class _Stop:
    def __init__(self, sequences: list[list[int]], end: list[int], min_tokens: int) -> None:
        self.sequences = {tuple(seq) for seq in sequences}
        self.lengths = sorted({len(seq) for seq in sequences})
        self.end, self.min_tokens = end, min_tokens

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        if len(output_ids) < self.min_tokens:
            return logits
        hit = any(
            n <= len(output_ids) and tuple(output_ids[len(output_ids) - n :]) in self.sequences for n in self.lengths
        )
        if hit:
            kept = [(t, logits[t].item()) for t in self.end if t < logits.shape[-1]]
            if kept:
                logits.fill_(float("-inf"))
                for token, value in kept:
                    logits[token] = value if math.isfinite(value) else 0.0
        return logits


class StopSequencesLogitsProcessor(AdapterLogitsProcessor):
    """Ends generation after any token sequence in ``extra_args["stop_token_sequences"]``."""

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        self.config_eos = config_eos_ids(vllm_config)

    @classmethod
    def validate_params(cls, params: Any) -> None:
        check_sequences(params, KEY)

    def is_argmax_invariant(self) -> bool:
        return False  # it forces the end token

    def new_req_logits_processor(self, params: Any) -> _Stop | None:
        value = xarg(params, KEY)
        if not value:
            return None
        return _Stop(token_sequences(value) or [], end_tokens(params, self.config_eos), int(params.min_tokens or 0))

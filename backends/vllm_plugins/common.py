"""Helpers shared by the plugins: reading and validating ``extra_args`` and a prompt-aware adapter."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from vllm.exceptions import VLLMValidationError
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor, BatchUpdate


def xarg(params: Any, key: str) -> Any:
    """The request's ``extra_args[key]`` (HTTP ``vllm_xargs``), or None."""
    return (params.extra_args or {}).get(key)


def reject(key: str, value: Any, why: str) -> VLLMValidationError:
    """The error vLLM turns into HTTP 400 with ``param`` = ``key``."""
    return VLLMValidationError(f"vllm_xargs.{key} {why}", parameter=key, value=value)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


SEPARATOR = -1  # between token sequences in one flat list: vLLM's ``vllm_xargs`` takes no nested lists


def token_sequences(value: Any) -> list[list[int]] | None:
    """A flat list of token ids with sequences separated by -1 (``[5, 6, -1, 7]`` is ``[[5, 6], [7]]``)
    as the sequences, or None when it is not one (an empty sequence, a negative id, not an integer)."""
    if not isinstance(value, list) or not all(is_int(t) and t >= SEPARATOR for t in value):
        return None
    sequences: list[list[int]] = [[]]
    for t in value:
        if t == SEPARATOR:
            sequences.append([])
        else:
            sequences[-1].append(t)
    return sequences if all(sequences) else None


def check_sequences(params: Any, key: str) -> None:
    """``validate_params`` of a plugin whose ``extra_args[key]`` holds token sequences."""
    value = xarg(params, key)
    if value is not None and token_sequences(value) is None:
        raise reject(key, value, "must be token-id sequences (non-negative integers), separated by -1")


def config_eos_ids(vllm_config: Any) -> list[int]:
    """The model config's EOS id(s): ``hf_text_config.eos_token_id``, an int, a list or absent."""
    eos = getattr(vllm_config.model_config.hf_text_config, "eos_token_id", None)
    if eos is None:
        return []
    return [int(i) for i in eos] if isinstance(eos, list | tuple) else [int(eos)]


def end_tokens(params: Any, config_eos: list[int]) -> list[int]:
    """The token that ends a request's generation when forced: its EOS (None under ``ignore_eos``),
    else the model config's, else under ``ignore_eos`` its ``stop_token_ids`` (``total_length``)."""
    if params.eos_token_id is not None:
        return [params.eos_token_id]
    if not params.ignore_eos:
        return list(config_eos)
    return sorted(set(params.stop_token_ids or ()))


class PromptAwareAdapter(AdapterLogitsProcessor):
    """``AdapterLogitsProcessor`` for per-request callables of ``(prompt_ids, output_ids, logits)``.

    A prompt given only as embeddings (``prompt_embeds``) reaches logits processors with prompt ids
    ``None``; the stock adapter then raises inside the engine's step, which takes the whole engine
    down. Here such a request gets an empty list instead: vLLM prompts are never empty, so the
    callables read ``[]`` as "prompt not known" and degrade as their modules document.
    """

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is not None and any(added[2] is None for added in batch_update.added):
            added = [
                (index, params, [] if prompt is None else prompt, out)
                for index, params, prompt, out in batch_update.added
            ]
            batch_update = dataclasses.replace(batch_update, added=added)
        super().update_state(batch_update)

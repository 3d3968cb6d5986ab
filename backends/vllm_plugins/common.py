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

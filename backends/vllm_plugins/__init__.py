"""vLLM logits-processor plugins that serve FriendliAI's samplers vLLM lacks natively.

Loaded by vLLM through the ``vllm.logits_processors`` entry point (pyproject.toml) and switched on
per request through ``SamplingParams.extra_args`` (HTTP: ``vllm_xargs``), which the gateway's vLLM
egress writes (``gateway/dialects/openai/egress.py``). They use vLLM's V1 sampler interface, the one
the CPU build and ``VLLM_USE_V2_MODEL_RUNNER=0`` GPU deployments run.

These modules import torch and vLLM and are only ever imported inside a vLLM process.
"""

from __future__ import annotations

from typing import Any


def arg(params: Any, name: str) -> Any:
    return (params.extra_args or {}).get(name)

"""Local inference backends: a pool of model-server replicas over HTTP (``replicas``), the in-process
vLLM engine (``vllm_engine``, an optional extra), and the vLLM logits-processor plugins that serve
Friendli's samplers (``vllm_plugins``).

``ENGINES`` is the registry of in-process providers: provider name → factory. Factories import their
engine lazily, so a gateway without the extra installed never imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from gateway.core.upstream import Upstream
from gateway.runtime.config import Target


def _vllm_engine(target: Target, public_model: str) -> Upstream:
    # Imported on use: vLLM is an optional extra (`pip install .[vllm]`) of several GB.
    module = importlib.import_module("backends.vllm_engine")
    return cast(Upstream, module.VLLMEngine(target, public_model))


ENGINES: dict[str, Callable[[Target, str], Upstream]] = {"vllm-engine": _vllm_engine}

__all__ = ["ENGINES"]

"""Local inference backends: a pool of model-server replicas over HTTP (``replicas``), the in-process
vLLM engine (``vllm_engine``, an optional extra), the built-in ``mock`` model (``mock``), and the vLLM
logits-processor plugins that serve Friendli's samplers (``vllm_plugins``).

``ENGINES`` is the registry of in-process providers: provider name → factory. Factories import their
engine lazily, so a gateway without the extra installed never imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from gateway.core.request import Feature
from gateway.core.upstream import Upstream
from gateway.dialects.openai.egress import VLLM_WIRE
from gateway.runtime.config import Target


def _vllm_engine(target: Target, public_model: str) -> Upstream:
    # Imported on use: vLLM is an optional extra (`pip install .[vllm]`) of several GB.
    module = importlib.import_module("backends.vllm_engine")
    return cast(Upstream, module.VLLMEngine(target, public_model))


def _mock(target: Target, public_model: str) -> Upstream:
    from backends.mock import MockEngine  # small and dependency-free, yet only loaded when configured

    return MockEngine(target, public_model)


ENGINES: dict[str, Callable[[Target, str], Upstream]] = {"vllm-engine": _vllm_engine, "mock": _mock}
# What an engine's target may add with ``extra_features``: the in-process vLLM loads the same plugins.
ENGINE_EXTRAS: dict[str, frozenset[Feature]] = {"vllm-engine": VLLM_WIRE.extras, "mock": frozenset()}
# In-process providers light enough for every worker process to run its own (``serve --workers N``).
PER_WORKER: frozenset[str] = frozenset({"mock"})

__all__ = ["ENGINES", "ENGINE_EXTRAS", "PER_WORKER"]

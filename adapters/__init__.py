"""Upstream vendor adapters: the IO side of egress, one module per vendor wire format.

``PROVIDERS`` is the explicit registry from a target's ``provider`` config value to the factory that
builds it at start-up; the value is also the metric label and log field for that target.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.openai import openai_target, vllm_target
from gateway.config import Target
from gateway.core.upstream import Upstream

Factory = Callable[[Target, str], Upstream]

PROVIDERS: dict[str, Factory] = {
    "openai": openai_target,
    "vllm": vllm_target,
}

__all__ = ["PROVIDERS", "Factory"]

"""The embedded default: what ``llm-gateway serve`` runs with no config file.

In-process state (no Redis), open access on loopback unless ``LLM_GATEWAY_API_KEY`` is set,
``vendor/model`` names routed to the vendors whose API keys are in the environment, and every other
model name to a local vLLM server at its conventional address (``VLLM_BASE_URL``, default
``http://127.0.0.1:8000/v1``), whose served models ``/v1/models`` lists once it is reachable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gateway.runtime.config import GatewayConfig, KeyEntry, Target, Team, Vendor, hash_key

LOCAL_VLLM = "http://127.0.0.1:8000/v1"

# vendor prefix → (provider, key variable, base-URL variable, default base URL)
VENDORS: dict[str, tuple[str, str, str, str]] = {
    "openai": ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1"),
}


def embedded(env: Mapping[str, str] | None = None) -> tuple[GatewayConfig, Target]:
    environ = os.environ if env is None else env
    vendors = {
        prefix: Vendor(provider=provider, base_url=environ.get(url_var, default), api_key_env=key_var)
        for prefix, (provider, key_var, url_var, default) in VENDORS.items()
        if environ.get(key_var)
    }
    teams: tuple[Team, ...] = ()
    key = environ.get("LLM_GATEWAY_API_KEY")
    if key:
        teams = (Team(id="default", keys=(KeyEntry(id="env", sha256=hash_key(key)),)),)
    config = GatewayConfig(vendors=vendors, teams=teams, auth="keys" if key else "none")
    local = Target(provider="vllm", base_url=environ.get("VLLM_BASE_URL", LOCAL_VLLM), name="local-vllm")
    return config, local

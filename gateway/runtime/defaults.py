"""The embedded default: what ``llm-gateway serve`` runs with no config file, and what it says at start.

In-process state (no Redis), open access on loopback unless ``LLM_GATEWAY_API_KEY`` is set, and:

* ``demo``: the built-in mock model (``backends/mock``), so the first request succeeds with nothing
  else running;
* ``vendor/model`` names: the vendors whose API keys are in the environment;
* every other name: the local vLLM server at its conventional address (``VLLM_BASE_URL``, default
  ``http://127.0.0.1:8000/v1``), whose served models ``/v1/models`` lists once it answers; when
  exactly one vendor key is set, a name the local vLLM has not listed goes to that vendor instead
  (``gpt-4o-mini`` → OpenAI), by the model table's fallback rule (``gateway/routing/table.py``).

What does not belong here: how a config file is read (``config_file.py``), how targets are built.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from gateway.runtime.config import GatewayConfig, KeyEntry, ModelEntry, Target, Team, Vendor, hash_key

LOCAL_VLLM = "http://127.0.0.1:8000/v1"
DEMO_MODEL = "demo"

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
    demo = ModelEntry(name=DEMO_MODEL, targets=(Target(provider="mock", name="mock:demo"),))
    config = GatewayConfig(models=(demo,), vendors=vendors, teams=teams, auth="keys" if key else "none")
    local = Target(provider="vllm", base_url=environ.get("VLLM_BASE_URL", LOCAL_VLLM), name="local-vllm")
    return config, local


LOOPBACK_NAMES = ("localhost",)


def beyond_loopback(host: str) -> bool:
    """Whether listening on ``host`` reaches beyond this machine: any address but a loopback one
    (``""``, ``0.0.0.0`` and ``::`` are every interface)."""
    if host in LOOPBACK_NAMES:
        return False
    try:
        return not ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return True  # a host name: whatever it resolves to, not known to be loopback


def open_refusal(config: GatewayConfig, host: str, allow_open: bool) -> str | None:
    """Why the embedded default will not listen on ``host``: open access (no ``LLM_GATEWAY_API_KEY``)
    beyond loopback would serve, and spend the vendor keys of, anyone who reaches it. None: it may."""
    if config.auth != "none" or allow_open or not beyond_loopback(host):
        return None
    return (
        f"error: --host {host or '(every interface)'} reaches beyond this machine and the embedded default "
        "has no key: set LLM_GATEWAY_API_KEY (clients send it as a Bearer token), serve a config file with "
        "teams and keys, or add --allow-open to serve anyone who reaches it"
    )


def announcement(config: GatewayConfig, local: Target, host: str, port: int) -> list[str]:
    """The start-up lines of the embedded default: where each model name goes, and two ready-to-paste
    first requests (curl, and the openai SDK)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # a wildcard bind, reached on loopback
    base = f"http://{shown}:{port}/v1"
    auth = config.auth == "keys"
    lines = [f"model {DEMO_MODEL!r}: the built-in mock (no model server needed)"]
    prefixes = sorted(config.vendors)
    for prefix in prefixes:
        lines.append(f"model names {prefix}/MODEL: {prefix} (its key variable is set)")
    if len(prefixes) == 1:
        lines.append(
            f"other model names: the local vLLM at {local.base_url} for the models it lists, "
            f"otherwise {prefixes[0]} (the only vendor whose key is set)"
        )
    else:
        missing = [VENDORS[p][1] for p in VENDORS if p not in config.vendors]
        hint = f"; set {' or '.join(missing)} to reach a vendor" if missing else ""
        lines.append(f"other model names: the local vLLM at {local.base_url}{hint}")
    header = " -H 'Authorization: Bearer '\"$LLM_GATEWAY_API_KEY\"" if auth else ""
    body = '{"model": "demo", "messages": [{"role": "user", "content": "Hello!"}]}'
    lines.append(f"try it: curl -s {base}/chat/completions -H 'Content-Type: application/json'{header} -d '{body}'")
    key = 'os.environ["LLM_GATEWAY_API_KEY"]' if auth else '"none"'
    call = (
        f'OpenAI(base_url="{base}", api_key={key}).chat.completions.create('
        'model="demo", messages=[{"role": "user", "content": "Hello!"}]).choices[0].message.content'
    )
    lines.append(f"or with the openai SDK: python -c 'import os; from openai import OpenAI; print({call})'")
    return lines

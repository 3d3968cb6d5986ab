"""The config file's JSON Schema, generated from its pydantic models (``config.py``), and the Helm
chart's ``values.schema.json`` built around it, so that Helm refuses at render time the config
values the gateway would refuse at start-up.

Pydantic's schema holds the shapes, types, bounds and unknown keys. What its validators check in code
is added here where JSON Schema can say it: the providers that exist, an HTTP provider's address, a
key's one source. The rest (names declared twice, prices) is left to ``check-config``, which the
chart's test runs on every rendered config.

What does not belong here: validating a config (``config.py``), the registries of providers (they
come in as arguments, since this layer may not import them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from gateway.runtime.config import GatewayConfig

_NOISE = ("title", "default")  # what a schema for validation does not need


def _clean(node: Any, names: bool = False) -> Any:
    """``names``: ``node`` maps field names (``properties``), which may be spelt as keywords."""
    if isinstance(node, dict):
        return {k: _clean(v, k == "properties" and not names) for k, v in node.items() if names or k not in _NOISE}
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def config_schema(http: Iterable[str], in_process: Iterable[str]) -> dict[str, Any]:
    """The config file's schema; ``http``, ``in_process``: the providers of ``adapters.PROVIDERS`` and
    ``backends.ENGINES``."""
    schema: dict[str, Any] = _clean(GatewayConfig.model_json_schema())
    defs = schema["$defs"]
    http = sorted(http)
    target = defs["Target"]
    target["properties"]["provider"] = {"enum": sorted({*http, *in_process})}
    target["allOf"] = [
        {  # gateway.web.app.check_target: an HTTP provider needs an address
            "if": {"properties": {"provider": {"enum": http}}},
            "then": {
                "anyOf": [
                    {"required": ["base_url"], "properties": {"base_url": {"minLength": 1}}},
                    {"required": ["replicas"], "properties": {"replicas": {"minItems": 1}}},
                ]
            },
        }
    ]
    # config._http_url: addresses are URLs (empty: none given)
    url = {"type": "string", "pattern": "^https?://"}
    target["properties"]["base_url"] = {"type": "string", "pattern": "^(https?://.*)?$"}
    target["properties"]["replicas"] = {"type": "array", "items": url}
    defs["Vendor"]["properties"]["base_url"] = url
    defs["TracingConfig"]["properties"]["endpoint"] = url
    defs["KeyEntry"]["oneOf"] = [{"required": ["sha256"]}, {"required": ["env"]}]
    defs["KeyEntry"]["properties"]["sha256"] = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
    return schema


# What the chart owns in the config it renders (deploy/helm/llm-gateway/templates/_helpers.tpl).
_CHART_CONFIG: dict[str, Any] = {
    "type": "object",
    "required": ["models"],
    "properties": {
        "models": {"type": "array", "minItems": 1},
        "redis": {"not": {}, "description": "set by the chart from .redis"},
        "limits": {
            "type": "object",
            "properties": {"replicas": {"not": {}, "description": "set by the chart: pods (HPA maximum) x workers"}},
        },
    },
}


def chart_schema(values: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The chart's values schema with its ``config`` checked against the config file's schema."""
    out = {k: v for k, v in values.items() if k != "$defs"}
    out["$defs"] = config["$defs"]
    gateway = {k: v for k, v in config.items() if k != "$defs"}
    out["properties"] = {**values["properties"], "config": {"allOf": [_CHART_CONFIG, gateway]}}
    return out


def dumps(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"

"""Upstream vendor adapters: the IO side of egress.

``PROVIDERS`` is the explicit registry from a target's ``provider`` config value to the vendor's wire
format; every provider is served by the one IO shell in ``adapters/http.py``. The provider name is
also the metric label and log field for its targets. A new vendor is a new ``Wire`` (sans-IO, in
``gateway/dialects/<vendor>/egress.py``) and one line here.
"""

from __future__ import annotations

from adapters.http import HTTPUpstream
from gateway.dialects.anthropic.count import ANTHROPIC_COUNT
from gateway.dialects.anthropic.egress import ANTHROPIC_TRANSLATED_WIRE, ANTHROPIC_WIRE, VLLM_MESSAGES_WIRE
from gateway.dialects.base import Counting, Wire
from gateway.dialects.friendli.egress import FRIENDLI_WIRE
from gateway.dialects.octoai.egress import OCTOAI_WIRE
from gateway.dialects.openai.egress import OPENAI_WIRE, VLLM_WIRE
from gateway.dialects.openai.tokenize import VLLM_TOKENIZE
from gateway.dialects.responses.egress import OPENAI_RESPONSES_WIRE, VLLM_RESPONSES_WIRE
from gateway.dialects.sgp.egress import SGP4_WIRE, SGP5_WIRE
from gateway.runtime.config import Target

PROVIDERS: dict[str, Wire] = {
    "openai": OPENAI_WIRE,
    "vllm": VLLM_WIRE,
    "friendli": FRIENDLI_WIRE,
    "sgp": SGP5_WIRE,
    "sgp-v4": SGP4_WIRE,
    "octoai": OCTOAI_WIRE,
    "anthropic": ANTHROPIC_WIRE,
}
# A provider's paths for a client's own body, by the client's dialect (``InternalRequest.native``,
# ``native_dialect``): tried first, translated through ``PROVIDERS`` once the upstream answers 404.
NATIVE: dict[str, dict[str, Wire]] = {
    "vllm": {"anthropic": VLLM_MESSAGES_WIRE, "responses": VLLM_RESPONSES_WIRE},
    "openai": {"responses": OPENAI_RESPONSES_WIRE},
}

# How a provider's targets count a prompt's tokens themselves (``POST /v1/messages/count_tokens``); the
# others are answered with the admission bound.
COUNTING: dict[str, Counting] = {"anthropic": ANTHROPIC_COUNT, "vllm": VLLM_TOKENIZE}


# The same providers with ``passthrough: false``: every body translated (nothing only the vendor's own
# path takes is sent; it is refused by name instead).
TRANSLATED: dict[str, Wire] = {"anthropic": ANTHROPIC_TRANSLATED_WIRE}


def wire_for(target: Target) -> Wire:
    """The target's wire: its provider's, or with ``passthrough: false`` the translating one."""
    return (
        PROVIDERS[target.provider]
        if target.passthrough
        else TRANSLATED.get(target.provider, PROVIDERS[target.provider])
    )


def native_for(target: Target) -> dict[str, Wire] | None:
    """The target's own paths for a client's body as it came; none with ``passthrough: false``."""
    return NATIVE.get(target.provider) if target.passthrough else None


def counting_for(target: Target) -> Counting | None:
    return COUNTING.get(target.provider)


def build(target: Target, public_model: str) -> HTTPUpstream:
    wire, native, counting = wire_for(target), native_for(target), counting_for(target)
    return HTTPUpstream(target, public_model, wire, native=native, counting=counting)


__all__ = ["COUNTING", "NATIVE", "PROVIDERS", "HTTPUpstream", "build", "counting_for", "native_for", "wire_for"]

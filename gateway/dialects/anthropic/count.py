"""Anthropic's ``POST /v1/messages/count_tokens`` asked of an ``anthropic`` target, sans-IO: the body its
wire would send for the request (an Anthropic client's own body as it came, with the target's model;
any other translated), less the fields only a generation takes, which Anthropic's count_tokens refuses
as extra inputs (anthropic SDK 2.14.0 ``MessageCountTokensParams`` has none of them). Its answer is
``{"input_tokens": N}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.request import InternalRequest, Operation
from gateway.dialects.base import Wire, count_in

JSON = Any
GENERATION_ONLY = frozenset(
    {"max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream", "service_tier"}
)


@dataclass(frozen=True, slots=True)
class AnthropicCount:
    def url(self, base_url: str, wire: Wire) -> str:
        return base_url + wire.path(Operation.CHAT) + "/count_tokens"  # beside /v1/messages

    def body(self, request: InternalRequest, wire: Wire, model: str) -> dict[str, JSON]:
        return {k: v for k, v in wire.encode(request, model).items() if k not in GENERATION_ONLY}

    def read(self, data: JSON) -> int | None:
        return count_in(data, "input_tokens")


ANTHROPIC_COUNT = AnthropicCount()

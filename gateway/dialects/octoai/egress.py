"""The internal request → an OctoAI-compatible upstream body (seed 003), and its answers back.

OctoAI's own service shut down in 2024; servers that kept its API (self-hosted OctoStack-style
deployments) take ``peft`` for adapters, ``min_p``, ``repetition_penalty`` and ``ignore_eos``, and put
stream usage on the last content chunk, which the shared reader accepts anywhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import UnsupportedFeature
from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import Completion
from gateway.dialects.openai import chunks
from gateway.dialects.openai import egress as oai

JSON = Any
F = Feature

OCTOAI_FEATURES = frozenset(
    {F.BATCH_PROMPT, F.TOKEN_PROMPT, F.N, F.BEST_OF, F.STOP, F.LOGIT_BIAS, F.LOGPROBS, F.ECHO, F.SUFFIX, F.SEED}
    | {F.MIN_P, F.REPETITION_PENALTY, F.IGNORE_EOS, F.ADAPTER, F.TOOLS, F.JSON_OBJECT, F.JSON_SCHEMA}
)


def encode(req: InternalRequest, model: str) -> dict[str, JSON]:
    body = oai.encode(dataclasses.replace(req, sampling=dataclasses.replace(req.sampling, structured=None)), model)
    so = req.sampling.structured
    if so is not None:
        if req.operation is not Operation.CHAT:
            raise UnsupportedFeature("response_format", "octoai", "structured output on completions")
        # OctoAI's JSON mode carries the schema inline (dialects.md §4.6)
        body["response_format"] = {"type": "json_object", **({"schema": so.value} if so.value else {})}
    if req.adapter:
        body["peft"] = req.adapter
    return body


@dataclass(frozen=True, slots=True)
class OctoAIWire:
    features: frozenset[Feature] = OCTOAI_FEATURES
    extras: frozenset[Feature] = frozenset()
    done_sentinel: bool = True

    def path(self, operation: Operation) -> str:
        return "/v1/chat/completions" if operation is Operation.CHAT else "/v1/completions"

    def headers(self, key: str | None, team: str | None, request: InternalRequest) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def encode(self, request: InternalRequest, model: str) -> dict[str, JSON]:
        return encode(request, model)

    def decode(self, data: JSON, request: InternalRequest) -> Completion:
        return oai.decode(data, request.operation)

    def reader(self, request: InternalRequest) -> chunks.ChunkDecoder:
        return chunks.ChunkDecoder(request.operation, choices=request.choice_count)


OCTOAI_WIRE = OctoAIWire()

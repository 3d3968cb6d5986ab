"""The internal request → a Scale SGP upstream body (``/v5`` or ``/v4/beta``), and SGP's answers back.

Translations: a structured-output constraint becomes SGP's ``guided_*`` field on ``/v4/beta`` (the
fields SGP itself forwards to vLLM-family models, seed 001) or ``response_format`` in chat; ``logprobs``
is a bool plus ``top_logprobs`` on ``/v4/beta`` and OpenAI's int on ``/v5``; pass-through parameters
and headers travel in ``inference_extra_params`` / ``inference_extra_headers``. SGP streams end
without ``[DONE]`` and report mid-stream errors as ``event: error`` or an ``error`` chunk.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import UnsupportedFeature
from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import Completion
from gateway.dialects.headers import passed_headers
from gateway.dialects.openai import chunks
from gateway.dialects.openai import egress as oai

JSON = Any
F = Feature

SGP5_FEATURES = frozenset(
    {F.BATCH_PROMPT, F.N, F.BEST_OF, F.STOP, F.LOGIT_BIAS, F.LOGPROBS, F.ECHO, F.SUFFIX, F.SEED, F.TOOLS}
    | {F.JSON_OBJECT, F.JSON_SCHEMA}
)
SGP4_FEATURES = (SGP5_FEATURES - {F.BATCH_PROMPT}) | {
    F.TOP_K,
    F.INCLUDE_STOP_STR,
    F.REGEX,
    F.CHOICE,
    F.GRAMMAR,
    F.AUDIO,
    F.PREDICTION,
    F.EXTRA_BODY,
    F.EXTRA_HEADERS,
}
TOP_LEVEL_EXTRAS = frozenset({"tools", "tool_choice", "parallel_tool_calls", "audio", "modalities", "prediction"})
GUIDED = {"json_schema": "guided_json", "regex": "guided_regex", "choice": "guided_choice", "grammar": "guided_grammar"}


def _structured(req: InternalRequest, body: dict[str, JSON], v4: bool, target: str) -> None:
    so = req.sampling.structured
    body.pop("structured_outputs", None)
    if so is None:
        return
    if req.operation is Operation.CHAT and so.kind in ("json_object", "json_schema"):
        body["response_format"] = (
            {"type": "json_object"}
            if so.kind == "json_object"
            else {"type": "json_schema", "json_schema": {"name": "output", "schema": so.value}}
        )
    elif v4 and so.kind in GUIDED:
        body[GUIDED[so.kind]] = so.value
    elif v4 and so.kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    else:
        raise UnsupportedFeature("response_format", target, f"{so.kind} output on SGP completions")


def encode(req: InternalRequest, model: str, *, v4: bool, target: str) -> dict[str, JSON]:
    body = oai.encode(dataclasses.replace(req, extra_body=None), model)
    _structured(req, body, v4, target)
    if v4 and req.sampling.logprobs is not None and req.operation is Operation.COMPLETION:
        body["logprobs"] = True  # seed 001: a bool, with the count in top_logprobs
        body["top_logprobs"] = req.sampling.logprobs
    extra = dict(req.extra_body or {})
    for key in TOP_LEVEL_EXTRAS & extra.keys():
        body[key] = extra.pop(key)
    if extra:
        body["inference_extra_params"] = extra
    if headers := passed_headers(req):
        body["inference_extra_headers"] = headers
    if req.timeout is not None:
        body["inference_timeout"] = req.timeout
    return body


@dataclass(frozen=True, slots=True)
class SGPWire:
    """The SGP base URL without a version segment; the adapter appends ``/v5/...`` or ``/v4/beta/...``."""

    v4: bool
    done_sentinel: bool = False
    extras: frozenset[Feature] = frozenset()

    @property
    def features(self) -> frozenset[Feature]:
        return SGP4_FEATURES if self.v4 else SGP5_FEATURES

    def path(self, operation: Operation) -> str:
        prefix = "/v4/beta" if self.v4 else "/v5"
        return prefix + ("/chat/completions" if operation is Operation.CHAT else "/completions")

    def headers(self, key: str | None, team: str | None, request: InternalRequest) -> dict[str, str]:
        headers = {"x-api-key": key} if key else {}
        if team:
            headers["x-selected-account-id"] = team
        return headers

    def encode(self, request: InternalRequest, model: str) -> dict[str, JSON]:
        return encode(request, model, v4=self.v4, target="sgp-v4" if self.v4 else "sgp")

    def decode(self, data: JSON, request: InternalRequest) -> Completion:
        return oai.decode(data, request.operation)

    def reader(self, request: InternalRequest) -> chunks.ChunkDecoder:
        return chunks.ChunkDecoder(request.operation, choices=request.choice_count)


SGP5_WIRE = SGPWire(v4=False)
SGP4_WIRE = SGPWire(v4=True)

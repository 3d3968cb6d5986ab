"""The openai SDK's request fields, API by API, as the gateway's bodies meet them: the route (dialect
and operation) and body model each API is validated against, a smallest valid body, and the SDK's
fields the gateway does not model, each with an example value and why it is refused by name (a 400 in
OpenAI's envelope whose ``param`` is the field) rather than served or passed on.

The sdk tier reads the pinned SDK's fields against this (``tests/sdk/test_openai_sdk_fields.py``): a
field a new SDK adds fails there until it is modelled or listed here. The unit tier checks each
refusal (``tests/unit/test_openai_sdk_fields.py``). The fields are openai 3.57.0's (its
``types/chat/completion_create_params.py``, ``types/completion_create_params.py``,
``types/embedding_create_params.py``, ``types/responses/response_create_params.py``), the same as
3.54.0's.

What does not belong here: the fields the gateway models (their handling is the dialect's, and its
tests'), or the SDK's answer shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gateway.dialects.openai.embeddings import EmbeddingsBody
from gateway.dialects.openai.schema import CompletionBody, OpenAIChatBody
from gateway.dialects.responses.schema import ResponsesBody
from gateway.web.pipeline import RouteSpec
from gateway.web.routes import ROUTES

JSON = Any
NOT_MODELLED = "an OpenAI-platform option the gateway does not model"


@dataclass(frozen=True)
class Api:
    """One of the SDK's request APIs as the gateway parses it."""

    name: str  # the SDK's resource, and the key the sdk tier's driver reports its fields under
    path: str
    body: type[BaseModel]  # what the gateway validates the body against: its fields are the modelled ones
    smallest: dict[str, JSON]
    unmodelled: Mapping[str, tuple[JSON, str]]  # field -> (an example value the SDK sends, why refused)

    def modelled(self) -> frozenset[str]:
        return frozenset(f.alias or name for name, f in self.body.model_fields.items())

    def route(self) -> RouteSpec:
        return next(r for r in ROUTES if r.method == "POST" and r.path == self.path)


CHAT = Api(
    "chat",
    "/v1/chat/completions",
    OpenAIChatBody,
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    {},
)
COMPLETIONS = Api("completions", "/v1/completions", CompletionBody, {"model": "m", "prompt": "hi"}, {})
EMBEDDINGS = Api("embeddings", "/v1/embeddings", EmbeddingsBody, {"model": "m", "input": "hi"}, {})
RESPONSES = Api(
    "responses",
    "/v1/responses",
    ResponsesBody,
    {"model": "m", "input": "hi"},
    {
        "background_options": ({"completion_window": "2h"}, "background responses are not served"),
    },
)
APIS = (CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES)

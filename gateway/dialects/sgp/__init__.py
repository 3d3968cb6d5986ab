"""Scale GenAI Platform: ``/v4/beta`` (seed 001, scale-gp 0.1.0a58/a62) and ``/v5`` (scale-gp-beta).

Quirks honoured (dialects.md §3, clients.md §5): ``x-api-key`` auth and ``x-selected-account-id``;
``vendor/model[/deployment]`` names (resolved by routing). The bodies are in ``schema``, their parsing
in ``parse``, answers and errors in ``render``, the upstream side in ``egress``; this module builds
the two dialects from them.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.dialects.base import ErrorReply, StreamEncoder
from gateway.dialects.openai.render import render as render_openai
from gateway.dialects.sgp.parse import parse_chat, parse_completion
from gateway.dialects.sgp.render import SGPEncoder, error_reply, style_for
from gateway.dialects.sgp.schema import SGPChatBody, SGPCompletionBody

JSON = Any


class SGPDialect:
    auth_header = "x-api-key"
    bearer_too = False
    team_header = "x-selected-account-id"
    id_header = "X-Request-Id"

    def __init__(self, name: str, logprobs: str) -> None:
        self.name = name
        self.style = style_for(logprobs)

    def select(self, body: dict[str, JSON], headers: Any) -> SGPDialect:
        return self

    def parse(self, operation: Operation, body: dict[str, JSON], flavour: str) -> InternalRequest:
        return parse_completion(body) if operation is Operation.COMPLETION else parse_chat(body)

    def render(self, request: InternalRequest, completion: Any) -> JSON:
        return render_openai(self.style, request, completion)

    def encoder(self, request: InternalRequest) -> StreamEncoder:
        return SGPEncoder(self.style, request)

    def error(self, err: GatewayError) -> ErrorReply:
        return error_reply(err)


SGP_V4 = SGPDialect("sgp", "chat")  # v4 beta answers logprobs chat-style (scale-gp a58)
SGP_V5 = SGPDialect("sgp5", "legacy")

__all__ = ["SGP_V4", "SGP_V5", "SGPChatBody", "SGPCompletionBody", "SGPDialect", "parse_chat", "parse_completion"]

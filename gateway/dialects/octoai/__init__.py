"""OctoAI (seed 003; octoai 1.11 and octoai-sdk 0.10.1), kept for legacy clients: the service itself
shut down on 2024-10-31 (dialects.md §4.0).

The bodies are in ``schema``, their parsing in ``parse``, answers and errors in ``render``, the
upstream side in ``egress``; this module builds the dialect from them.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.dialects.base import ErrorReply, StreamEncoder
from gateway.dialects.octoai.parse import parse_chat, parse_completion
from gateway.dialects.octoai.render import STYLE, error_reply
from gateway.dialects.octoai.schema import OctoChatBody, OctoExtras
from gateway.dialects.openai.render import ChunkEncoder
from gateway.dialects.openai.render import render as render_openai

JSON = Any


class OctoAIDialect:
    name = "octoai"
    auth_header = "authorization"
    bearer_too = False
    team_header = None
    id_header = "X-Request-Id"

    def select(self, body: dict[str, JSON], headers: Any) -> OctoAIDialect:
        return self

    def parse(self, operation: Operation, body: dict[str, JSON], flavour: str) -> InternalRequest:
        return parse_completion(body) if operation is Operation.COMPLETION else parse_chat(body)

    def render(self, request: InternalRequest, completion: Any) -> JSON:
        return render_openai(STYLE, request, completion)

    def encoder(self, request: InternalRequest) -> StreamEncoder:
        return ChunkEncoder(STYLE, request)

    def error(self, err: GatewayError) -> ErrorReply:
        return error_reply(err)


OCTOAI = OctoAIDialect()

__all__ = ["OCTOAI", "OctoAIDialect", "OctoChatBody", "OctoExtras", "parse_chat", "parse_completion"]

"""Anthropic Messages: ``POST /v1/messages`` and ``/v1/messages/count_tokens``, as the Anthropic SDKs
and Claude Code send them.

The bodies are in ``schema``, their parsing in ``parse``, answers and errors in ``render``; this module
builds the dialect from them. The key comes as ``x-api-key`` or, as current SDKs send it,
``Authorization: Bearer``; ``anthropic-version`` is accepted as given, and ``anthropic-beta`` is sent on
to Anthropic targets; one the gateway cannot honour elsewhere is refused by name by the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.core.response import Completion
from gateway.dialects.anthropic.parse import betas_of, parse, parse_count
from gateway.dialects.anthropic.render import MessagesEncoder, anthropic_error, render
from gateway.dialects.anthropic.schema import CountTokensBody, MessagesBody
from gateway.dialects.base import ErrorReply, StreamEncoder

JSON = Any


class AnthropicDialect:
    name = "anthropic"
    auth_header = "x-api-key"
    bearer_too = True  # current SDKs send the key as Authorization: Bearer
    team_header = "anthropic-workspace-id"  # Anthropic's workspace: the gateway's team
    # Anthropic's API sends the id in ``request-id`` on every answer, where its SDKs read it
    # (anthropic 2.14.0 ``_request_id``, ``APIStatusError.request_id``; its "Errors" page)
    id_header = "request-id"

    def __init__(self, betas: str = "") -> None:
        self.betas = betas  # this request's betas

    def select(self, body: dict[str, JSON], headers: Mapping[str, str]) -> AnthropicDialect:
        """Itself, or for a request with betas, a dialect that carries them."""
        betas = betas_of(headers)
        return AnthropicDialect(betas) if betas else self

    def parse(self, operation: Operation, body: dict[str, JSON], flavour: str) -> InternalRequest:
        return parse_count(body, self.betas) if flavour == "count_tokens" else parse(body, self.betas)

    def render(self, request: InternalRequest, completion: Completion) -> JSON:
        return render(request, completion)

    def encoder(self, request: InternalRequest) -> StreamEncoder:
        return MessagesEncoder(request)

    def error(self, err: GatewayError) -> ErrorReply:
        return anthropic_error(err)


ANTHROPIC = AnthropicDialect()

__all__ = ["ANTHROPIC", "AnthropicDialect", "CountTokensBody", "MessagesBody"]

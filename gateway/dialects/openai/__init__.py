"""OpenAI: the baseline dialect (dialects.md §1, clients.md §2), both ways.

The bodies are in ``schema``, their parsing in ``parse``, answers and errors in ``render`` (with
``relay``: upstream chunks passed through, retouched in bytes), the upstream side (the same shapes,
read and written by the OpenAI-compatible upstream adapter) in ``egress``, its streams' chunks read in
``chunks``; this module builds the dialect from them.

``/v1/completions`` and ``/v1/chat/completions`` are shared with friendli-client, the Friendli
container SDK and both OctoAI SDKs; ``select`` recognises them by their body keys and SDK headers
(dialects.md §7) so each gets its own dialect's answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.core.response import Completion
from gateway.dialects.base import Dialect, ErrorReply, StreamEncoder
from gateway.dialects.openai import parse as request_codec
from gateway.dialects.openai.render import OPENAI_STYLE, ChunkEncoder, openai_error
from gateway.dialects.openai.render import render as render_openai
from gateway.dialects.openai.schema import FRIENDLI_KEYS, OCTOAI_KEYS

JSON = Any


class OpenAIDialect:
    name = "openai"
    auth_header = "authorization"
    bearer_too = False
    team_header = "openai-organization"
    id_header = "X-Request-Id"

    def __init__(self, friendli: Dialect, octoai: Dialect) -> None:
        self._friendli = friendli
        self._octoai = octoai

    def select(self, body: dict[str, JSON], headers: Mapping[str, str]) -> Dialect:
        agent = headers.get("user-agent", "").lower()
        if "x-friendli-team" in headers or "friendli" in agent or not FRIENDLI_KEYS.isdisjoint(body):
            return self._friendli.select(body, headers)
        if (
            agent.startswith("octoai-")
            or headers.get("x-fern-sdk-name") == "octoai"
            or not OCTOAI_KEYS.isdisjoint(body)
        ):
            return self._octoai
        return self

    def parse(self, operation: Operation, body: dict[str, JSON], flavour: str) -> InternalRequest:
        return request_codec.parse(operation, body)

    def render(self, request: InternalRequest, completion: Completion) -> JSON:
        return render_openai(OPENAI_STYLE, request, completion)

    def encoder(self, request: InternalRequest) -> StreamEncoder:
        return ChunkEncoder(OPENAI_STYLE, request)

    def error(self, err: GatewayError) -> ErrorReply:
        return openai_error(err)

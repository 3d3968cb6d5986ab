"""FriendliAI, current and 2024 generations (dialects.md §2, clients.md §3-4).

A request carrying any 2024-only key (friendli-client sends them all, as ``null``) is answered by the
2024 dialect, whose completion stream is friendli-client's. The bodies are in ``schema``, their
parsing in ``parse``, answers and errors in ``render``, the upstream side in ``egress``; this module
builds the two dialects from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.core.response import Completion
from gateway.dialects.base import ErrorReply, StreamEncoder
from gateway.dialects.friendli.parse import parse_chat, parse_completion
from gateway.dialects.friendli.render import STYLE, STYLE_STREAM, Legacy2024Encoder, error_reply
from gateway.dialects.friendli.schema import LEGACY_FIELDS
from gateway.dialects.openai.render import ChunkEncoder
from gateway.dialects.openai.render import render as render_openai

JSON = Any


class FriendliDialect:
    auth_header = "authorization"
    bearer_too = False
    team_header = "x-friendli-team"
    id_header = "X-Request-Id"

    def __init__(self, *, legacy: bool) -> None:
        self.legacy = legacy
        self.name = "friendli2024" if legacy else "friendli"

    def select(self, body: dict[str, JSON], headers: Mapping[str, str]) -> FriendliDialect:
        """The 2024 generation is recognised by its keys, on any Friendli path."""
        if self.legacy or LEGACY_FIELDS.isdisjoint(body):
            return self
        return FRIENDLI_2024

    def parse(self, operation: Operation, body: dict[str, JSON], flavour: str) -> InternalRequest:
        if operation is Operation.COMPLETION:
            # friendli-client's stream is 2024 lines, not chunks (``Legacy2024Encoder``)
            return parse_completion(body, flavour, legacy=self.legacy)
        return parse_chat(body, flavour)

    def render(self, request: InternalRequest, completion: Completion) -> JSON:
        return render_openai(STYLE, request, completion)

    def encoder(self, request: InternalRequest) -> StreamEncoder:
        if self.legacy and request.operation is Operation.COMPLETION:
            return Legacy2024Encoder(request)
        return ChunkEncoder(STYLE_STREAM, request)

    def error(self, err: GatewayError) -> ErrorReply:
        return error_reply(err)


FRIENDLI = FriendliDialect(legacy=False)
FRIENDLI_2024 = FriendliDialect(legacy=True)

__all__ = ["FRIENDLI", "FRIENDLI_2024", "FriendliDialect"]

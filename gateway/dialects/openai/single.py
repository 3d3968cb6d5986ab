"""An OpenAI API served on a path of its own (Responses, embeddings): no other SDK shares the path, so
there is nothing to tell apart; OpenAI's key and team headers, and OpenAI's error envelope."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.core.response import Completion
from gateway.dialects.base import Dialect, ErrorReply, StreamEncoder
from gateway.dialects.openai.render import openai_error

JSON = Any


@dataclass(frozen=True, slots=True)
class SinglePathDialect:
    name: str
    parser: Callable[[dict[str, JSON]], InternalRequest]
    renderer: Callable[[InternalRequest, Completion], JSON]
    streamer: Callable[[InternalRequest], StreamEncoder]
    auth_header: ClassVar[str] = "authorization"
    team_header: ClassVar[str] = "openai-organization"
    bearer_too: ClassVar[bool] = False
    id_header: ClassVar[str] = "X-Request-Id"

    def select(self, body: dict[str, JSON], headers: Mapping[str, str]) -> Dialect:
        return self

    def parse(self, operation: Operation, body: dict[str, JSON], flavour: str) -> InternalRequest:
        return self.parser(body)

    def render(self, request: InternalRequest, completion: Completion) -> JSON:
        return self.renderer(request, completion)

    def encoder(self, request: InternalRequest) -> StreamEncoder:
        return self.streamer(request)

    def error(self, err: GatewayError) -> ErrorReply:
        return openai_error(err)

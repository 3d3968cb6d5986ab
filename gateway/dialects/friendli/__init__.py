"""FriendliAI, current and 2024 generations (dialects.md §2, clients.md §3-4).

Answers carry what Friendli's SDKs require: ``choices[].seed`` and ``choices[].tokens`` (friendli
0.16 and friendli-client 1.5 both fail validation without them), stream chunks carry the sampled
``token``. A request carrying any 2024-only key (friendli-client sends them all, as ``null``) gets
the 2024 stream: ``token_sampled`` lines, then one ``complete`` line with the whole answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.errors import DeadlineExceeded, GatewayError
from gateway.core.request import InternalRequest, Operation
from gateway.core.response import Accumulator, Completion, Delta, StreamEvent
from gateway.dialects.base import ErrorReply, StreamEncoder, retry_headers
from gateway.dialects.common import DONE, sse
from gateway.dialects.friendli.parse import parse_chat, parse_completion
from gateway.dialects.friendli.schema import LEGACY_FIELDS
from gateway.dialects.openai.render import ChunkEncoder, Style, error_object, render

JSON = Any

# Friendli knows only stop|length for completions (dialects.md §6.12); chat adds tool_calls.
STYLE = Style(token_ids=True, seed=True, usage_details=True, finish={"content_filter": "stop", "abort": "stop"})


def error_envelope(err: GatewayError) -> JSON:
    # Third-party Friendli clients read a top-level ``message``, others OpenAI's ``error.message``
    # (dialects.md §2.8): send both.
    return {"message": err.message, "error": error_object(err)}


class Legacy2024Encoder:
    """friendli-client's completion stream: it ``json.loads`` every line, needs ``event`` and
    ``token`` on each, and stops at the first line that parses as a whole ``Completion``."""

    def __init__(self, req: InternalRequest) -> None:
        self.req = req
        self.acc = Accumulator()

    def event(self, ev: StreamEvent) -> bytes:
        self.acc.add(ev)
        if not isinstance(ev, Delta) or not (ev.text or ev.token_ids):
            return b""
        token = ev.token_ids[-1] if ev.token_ids else None
        return sse({"event": "token_sampled", "index": ev.index, "text": ev.text, "token": token})

    def end(self) -> bytes:
        body = render(STYLE, self.req, self.acc.completion())
        body["event"] = "complete"
        return sse(body) + DONE

    def error(self, err: GatewayError) -> bytes:
        return sse({"event": "error", "token": None, **error_envelope(err)})


STYLE_STREAM = Style(
    token_ids=True,
    usage_details=True,
    finish=STYLE.finish,
    stream_error=error_envelope,
)


class FriendliDialect:
    auth_header = "authorization"
    team_header = "x-friendli-team"

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
        return render(STYLE, request, completion)

    def encoder(self, request: InternalRequest) -> StreamEncoder:
        if self.legacy and request.operation is Operation.COMPLETION:
            return Legacy2024Encoder(request)
        return ChunkEncoder(STYLE_STREAM, request)

    def error(self, err: GatewayError) -> ErrorReply:
        # Friendli answers an expired ``timeout_microseconds`` with 429 (seed 002).
        status = 429 if isinstance(err, DeadlineExceeded) else err.status
        return ErrorReply(status, error_envelope(err), retry_headers(err))


FRIENDLI = FriendliDialect(legacy=False)
FRIENDLI_2024 = FriendliDialect(legacy=True)

__all__ = ["FRIENDLI", "FRIENDLI_2024", "FriendliDialect"]

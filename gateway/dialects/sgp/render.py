"""Internal answers → Scale SGP's wire answers: OpenAI's shape (``Style``) with usage always on and
streams that never end with ``[DONE]`` (every SGP SDK ``json.loads`` it and fails); FastAPI error
bodies (``detail``); a mid-stream error as ``event: error`` (scale-gp raises on it) followed by an
in-band ``error`` chunk (scale-gp-beta skips named events but yields the chunk). scale-gp-beta 0.7
yields that chunk as one more ``Completion`` and ends the stream without raising, so ``/v5`` streams
end cut short after it: the SDK's HTTP client raises on the unfinished body.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import GatewayError, InvalidRequest
from gateway.core.request import InternalRequest
from gateway.dialects.base import ErrorReply, retry_headers
from gateway.dialects.common import dumps
from gateway.dialects.openai.render import ChunkEncoder, Style
from gateway.dialects.refusals import parts_of

JSON = Any


def style_for(logprobs: str) -> Style:
    """``logprobs``: "chat" (``/v4/beta``, scale-gp a58) or "legacy" (``/v5``, scale-gp-beta)."""
    return Style(
        done=False,
        fingerprint="",
        usage_always=True,
        usage_details=True,
        logprobs=logprobs,  # type: ignore[arg-type]
        cut_after_error=logprobs == "legacy",
    )


def _error_chunk(err: GatewayError) -> JSON:
    return {"error": {"message": err.message, "status_code": err.status}}


class SGPEncoder:
    """OpenAI chunks without ``[DONE]``; a mid-stream error is sent both ways (see module doc)."""

    continuable = True  # its events go on after any of its own or relayed ones (``StreamEncoder``)

    def __init__(self, style: Style, req: InternalRequest) -> None:
        self.inner = ChunkEncoder(style, req)
        self.cut_after_error = style.cut_after_error

    def event(self, ev: Any) -> bytes:
        return self.inner.event(ev)

    def end(self) -> bytes:
        return self.inner.end()

    def error(self, err: GatewayError) -> bytes:
        data = dumps(_error_chunk(err))
        return b"event: error\ndata: " + data + b"\n\ndata: " + data + b"\n\n"


def error_reply(err: GatewayError) -> ErrorReply:
    if isinstance(err, InvalidRequest):
        # FastAPI's validation envelope, which SGP's backend uses (dialects.md §3.6): ``loc`` is the
        # field's path, a list's index as a number (``["body", "messages", 0, "content"]``)
        loc = ["body", *parts_of(err.param)] if err.param else ["body"]
        detail = [{"loc": loc, "msg": err.message, "type": "value_error"}]
        return ErrorReply(422, {"detail": detail})
    status = err.status
    body: JSON = {"detail": err.message}
    if err.param:  # a request error's, or the field an upstream's refusal named
        body["param"] = err.param
    return ErrorReply(status, body, retry_headers(err))

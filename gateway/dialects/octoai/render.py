"""Internal answers → OctoAI's wire answers: OpenAI's shape (``Style``) with a ``system_fingerprint``
always (octoai drops chunks without it, silently), stream usage on the last content chunk, chat-style
logprobs, ``cancelled`` for an aborted choice; no SSE comments or ``event:`` lines (octoai-sdk raises
on them); error bodies with top-level ``message`` and ``type`` (clients.md §6). A stream that fails
midway ends cut short after its error chunk: octoai 1.11 skips every chunk it cannot parse as an
answer's (the error's too) and octoai-sdk 0.10's ``infer_stream`` yields it as one more, so only the
unfinished body makes their HTTP clients raise.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import GatewayError
from gateway.dialects.base import ErrorReply, retry_headers
from gateway.dialects.openai.render import Style

JSON = Any


STYLE = Style(
    fingerprint="fp_llm_gateway",
    usage_on_last_chunk=True,
    logprobs="chat",
    finish={"abort": "cancelled"},
    stream_error=lambda err: error_body(err),
    cut_after_error=True,
)


def error_body(err: GatewayError) -> JSON:
    return {
        "object": "error",
        "type": err.code,
        "message": err.message,
        "code": None,
        "param": err.param,
        "validation_errors": {err.param: err.message} if err.param else None,
    }


def error_reply(err: GatewayError) -> ErrorReply:
    return ErrorReply(err.status, error_body(err), retry_headers(err))

"""Internal answers → FriendliAI's wire answers, current and 2024 generations (dialects.md §2,
clients.md §3-4).

Answers carry what Friendli's SDKs require: ``choices[].seed`` and ``choices[].tokens`` (friendli
0.16 and friendli-client 1.5 both fail validation without them), stream chunks carry the sampled
``token``. The 2024 completion stream is ``token_sampled`` lines, then one ``complete`` line with the
whole answer. Error bodies carry both a top-level ``message`` and OpenAI's ``error`` object.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import DeadlineExceeded, GatewayError
from gateway.core.request import InternalRequest
from gateway.core.response import Accumulator, Delta, StreamEvent
from gateway.dialects.base import ErrorReply, retry_headers
from gateway.dialects.common import DONE, sse
from gateway.dialects.openai.render import Style, error_object, render

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

    continuable = True  # its events go on after any of its own or relayed ones (``StreamEncoder``)
    # friendli-client 1.5.8 yields the error line as one more ``CompletionLine`` (and ``wait()`` skips
    # it) and takes a clean end for a finished stream: cut short, its HTTP client raises.
    cut_after_error = True

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


def error_reply(err: GatewayError) -> ErrorReply:
    # Friendli answers an expired ``timeout_microseconds`` with 429 (seed 002).
    status = 429 if isinstance(err, DeadlineExceeded) else err.status
    return ErrorReply(status, error_envelope(err), retry_headers(err))

"""OpenAI Responses (``POST /v1/responses``): what the OpenAI Agents SDK and Codex call.

Parsed into the internal chat request (``parse``) so that every chat target serves it, and rendered
back as a ``response`` object or a stream of typed events (``render``). The conversation state
(``store``, ``previous_response_id``) is kept by the web layer (``gateway/web/responses.py``) with
this codec's sans-IO pieces. Errors use OpenAI's envelope.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.core.request import InternalRequest
from gateway.dialects.openai.single import SinglePathDialect
from gateway.dialects.responses.parse import Turn, normalize, with_history
from gateway.dialects.responses.parse import parse as parse_responses
from gateway.dialects.responses.render import EventEncoder, render

JSON = Any


def _parse(body: dict[str, JSON]) -> InternalRequest:
    return parse_responses(body, int(time.time()))


RESPONSES = SinglePathDialect("responses", _parse, render, EventEncoder)

__all__ = ["RESPONSES", "Turn", "normalize", "with_history"]

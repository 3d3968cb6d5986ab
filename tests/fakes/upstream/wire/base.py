"""What every wire provides: how its vendor's body reads, how answers, chunks and errors are drawn."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Job

JSON = dict[str, Any]
# FastAPI's JSONResponse and pydantic's model_dump_json (vLLM, OpenAI): compact, UTF-8 left unescaped.
compact: Final = functools.partial(json.dumps, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Chunk:
    payload: JSON
    is_token: bool  # counts towards ``reset_after`` and ``error_after``
    event: str | None = None  # the SSE event name (Anthropic names every event); None: data only


@dataclass(frozen=True, slots=True)
class Wire:
    """One vendor's wire format. ``read`` maps the vendor's request body onto the fields the jobs read
    (raising the vendor's own rejections); ``body`` and ``chunks`` draw a job (``chat``: the chat route)."""

    name: str
    prefix: str  # the generation routes live under it: PREFIX/completions, PREFIX/chat/completions
    body: Callable[[Job, bool], JSON]
    chunks: Callable[[Job, bool], Iterator[Chunk]]
    error: Callable[[ApiError], JSON]
    read: Callable[[JSON], JSON] = lambda body: body
    dumps: Callable[[Any], str] = compact
    done: bool = True  # the stream ends with ``data: [DONE]``
    key_header: str = "authorization"  # where the API key travels: "Bearer KEY", or the key alone
    base_suffix: str = ""  # what a client's base URL adds to the server's origin
    strict_models: bool = False  # unknown models answer 404 (vLLM) rather than being served anyway
    context: int = 131_072  # the served model's context length: vLLM's stand-in is small, vendors' large
    headers: tuple[tuple[str, str], ...] = field(default=())  # added to every answer
    chat_path: str = "/chat/completions"  # the chat route under ``prefix`` (Anthropic: /messages)
    error_event: bool = False  # an in-stream error is an ``event: error`` (Anthropic), not a data line
    version_header: str | None = None  # a header every generation request must carry (anthropic-version)


def openai_error(exc: ApiError, kind: str = "invalid_request_error", code: object = None) -> JSON:
    return {"error": {"message": exc.message, "type": kind, "param": exc.param, "code": code}}

"""Scale SGP (``shared/dialects.md`` §3): ``x-api-key``, routes under ``/v5`` (and ``/v4/beta``), usage
on the final chunk, no ``[DONE]`` (the stream just ends), FastAPI's ``{"detail": ...}`` errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Final

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Job
from tests.fakes.upstream.wire import openai
from tests.fakes.upstream.wire.base import JSON, Chunk, Wire


def chunks(job: Job, chat: bool) -> Iterator[Chunk]:
    out = openai.choice_chunks(job, chat)
    out[-1] = out[-1] | {"usage": job.usage()}
    return (Chunk(c, c["choices"][0]["finish_reason"] is None) for c in out)


def error(exc: ApiError) -> JSON:
    return {"detail": exc.message}


def wire(name: str, prefix: str) -> Wire:
    return Wire(name, prefix, openai.body, chunks, error, dumps=json.dumps, done=False, key_header="x-api-key")


WIRE: Final = wire("sgp", "/v5")
WIRE_V4: Final = wire("sgp-v4", "/v4/beta")

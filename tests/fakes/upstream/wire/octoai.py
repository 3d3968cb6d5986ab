"""OctoAI (``shared/dialects.md`` §4): ``system_fingerprint`` on every body and chunk, the finish and
the usage on the last content chunk (no finish chunk of its own), ``[DONE]``, flat error objects."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Final

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Job
from tests.fakes.upstream.wire import openai
from tests.fakes.upstream.wire.base import JSON, Chunk, Wire

FINGERPRINT: Final = {"system_fingerprint": "fp_octo"}


def body(job: Job, chat: bool) -> JSON:
    return openai.body(job, chat) | FINGERPRINT


def chunks(job: Job, chat: bool) -> Iterator[Chunk]:
    out = [c | FINGERPRINT for c in openai.choice_chunks(job, chat, finish_apart=False)]
    out[-1] = out[-1] | {"usage": job.usage()}
    return (Chunk(c, True) for c in out)


def error(exc: ApiError) -> JSON:
    return {"object": "error", "type": "error", "message": exc.message, "code": None, "param": None}


WIRE: Final = Wire("octoai", "/v1", body, chunks, error, dumps=json.dumps)

"""FriendliAI (``shared/dialects.md`` §2): today's API, OpenAI-like with the seed used and the output
token ids per choice, ``token`` per stream chunk and no ``created`` in whole bodies; and the 2024 API,
whose stream is ``token_sampled`` events and one ``complete`` (no ids, no finish reasons). Errors are
``{"message": ...}``; ``stop`` must be a list."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Final

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Job
from tests.fakes.upstream.wire import openai
from tests.fakes.upstream.wire.base import JSON, Chunk, Wire

DRAWN_SEED: Final = 7  # the seed Friendli reports having drawn when the request gave none


def read(body: JSON) -> JSON:
    if isinstance(body.get("stop"), str):
        raise ApiError(422, "stop must be a list")
    if "tokens" in body and "prompt" not in body:
        body = {k: v for k, v in body.items() if k != "tokens"} | {"prompt": body["tokens"]}
    seed = body.get("seed")
    if isinstance(seed, list):  # one seed per generation; the fake decodes them all with the first
        body = body | {"seed": seed[0] if seed else None}
    return body


def seeds(job: Job, index: int) -> JSON:
    return {"seed": DRAWN_SEED if job.seed is None else job.seed, "tokens": job.choices[index].token_ids}


def body(job: Job, chat: bool) -> JSON:
    return openai.body(job, chat, seeds, created=False)


def chunks(job: Job, chat: bool) -> Iterator[Chunk]:
    return openai.with_usage_chunk(job, chat, openai.choice_chunks(job, chat, token_key="token"))


def body_2024(job: Job, chat: bool) -> JSON:
    out = openai.body(job, chat, seeds)
    for c in out["choices"]:
        del c["finish_reason"], c["logprobs"]
    return {"choices": out["choices"], "usage": out["usage"]}


def chunks_2024(job: Job, chat: bool) -> Iterator[Chunk]:
    for i, c in enumerate(job.choices):
        for s in c.steps:
            if s.text:
                yield Chunk({"event": "token_sampled", "index": i, "text": s.text, "token": s.token_id}, True)
    yield Chunk({"event": "complete", **body_2024(job, chat)}, False)


def error(exc: ApiError) -> JSON:
    return {"message": exc.message}


WIRE: Final = Wire("friendli", "/v1", body, chunks, error, read, json.dumps)
WIRE_2024: Final = Wire("friendli2024", "/v1", body_2024, chunks_2024, error, read, json.dumps)

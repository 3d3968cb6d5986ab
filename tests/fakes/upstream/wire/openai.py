"""OpenAI's own API (``shared/dialects.md`` §1): one content chunk per token with the role on a chat
choice's first, a separate finish chunk per choice, ``"usage": null`` on every chunk and a usage chunk
when ``stream_options.include_usage``, ``[DONE]``; Cloudflare's cookies on every answer. The helpers
here draw the OpenAI-like shape the other vendors vary (``friendli``, ``sgp``, ``octoai``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Job
from tests.fakes.upstream.wire.base import JSON, Chunk, Wire, openai_error

ChoiceExtra = Callable[[Job, int], JSON]  # what a vendor adds to choice i of a whole answer


def no_extra(job: Job, index: int) -> JSON:
    return {}


def body(job: Job, chat: bool, extra: ChoiceExtra = no_extra, created: bool = True) -> JSON:
    """The whole answer: choices (text or message, finish_reason, logprobs), usage, identity."""
    choices = []
    for i, c in enumerate(job.choices):
        content: JSON = {"message": {"role": "assistant", "content": c.text}} if chat else {"text": c.text}
        choices.append({"index": i, **content, "finish_reason": c.steps[-1].finish_reason, "logprobs": None})
        choices[-1] |= extra(job, i)
    out: JSON = {"id": job.id, "object": "chat.completion" if chat else "text_completion", "model": job.model}
    out |= {"created": job.created} if created else {}
    return out | {"choices": choices, "usage": job.usage()}


def head(job: Job, chat: bool) -> JSON:
    obj = "chat.completion.chunk" if chat else "text_completion"
    return {"id": job.id, "object": obj, "created": job.created, "model": job.model}


def content(chat: bool, text: str, role: bool = False) -> JSON:
    if not chat:
        return {"text": text}
    return {"delta": {"role": "assistant", "content": text} if role else {"content": text}}


def choice_chunks(job: Job, chat: bool, token_key: str | None = None, finish_apart: bool = True) -> list[JSON]:
    """Each choice in turn: one chunk per token that adds text (``token_key``: the token id under that
    key), the finish on a chunk of its own (``finish_apart``) or on the last content chunk."""
    top, out = head(job, chat), []
    for i, c in enumerate(job.choices):
        steps = [s for s in c.steps if s.text]
        for j, step in enumerate(steps):
            last = j == len(steps) - 1 and not finish_apart
            choice: JSON = {"index": i, **content(chat, step.text, role=j == 0)}
            choice |= {"finish_reason": c.steps[-1].finish_reason if last else None, "logprobs": None}
            choice |= {token_key: step.token_id} if token_key else {}
            out.append(top | {"choices": [choice]})
        if finish_apart or not steps:
            end = {"index": i, **content(chat, ""), "finish_reason": c.steps[-1].finish_reason, "logprobs": None}
            out.append(top | {"choices": [end]})
    return out


def with_usage_chunk(job: Job, chat: bool, chunks: list[JSON]) -> Iterator[Chunk]:
    """OpenAI's usage rule: asked for, ``"usage": null`` on every chunk, then one with empty choices."""
    for c in chunks:
        yield Chunk(c | {"usage": None} if job.include_usage else c, bool(c["choices"][0].get("finish_reason") is None))
    if job.include_usage:
        yield Chunk(head(job, chat) | {"choices": [], "usage": job.usage()}, False)


def chunks(job: Job, chat: bool) -> Iterator[Chunk]:
    return with_usage_chunk(job, chat, choice_chunks(job, chat))


def error(exc: ApiError) -> JSON:
    return openai_error(exc)


# OpenAI's API sits behind Cloudflare, which sets these on every answer (per-client state: a gateway
# must not hand one team's cookies to the next team's requests).
COOKIES: Final = (("Set-Cookie", "__cf_bm=bm; Path=/; HttpOnly"), ("Set-Cookie", "_cfuvid=uvid; Path=/; HttpOnly"))

WIRE: Final = Wire("openai", "/v1", body, chunks, error, base_suffix="/v1", headers=COOKIES)

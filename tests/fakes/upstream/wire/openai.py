"""OpenAI's own API (``shared/dialects.md`` §1): one content chunk per token with the role on a chat
choice's first, a separate finish chunk per choice, ``"usage": null`` on every chunk and a usage chunk
when ``stream_options.include_usage``, ``[DONE]``; a tool call's arguments in ``tool_calls`` pieces;
Cloudflare's cookies on every answer; its reasoning models' rules for a chat (``read``). The helpers
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
        content: JSON = {"message": message(job, c.text)} if chat else {"text": c.text}
        choices.append({"index": i, **content, "finish_reason": c.steps[-1].finish_reason, "logprobs": None})
        choices[-1] |= extra(job, i)
    out: JSON = {"id": job.id, "object": "chat.completion" if chat else "text_completion", "model": job.model}
    out |= {"created": job.created} if created else {}
    return out | {"choices": choices, "usage": job.usage()}


def message(job: Job, text: str) -> JSON:
    """A whole chat answer's message: its text, or the tool call whose arguments the text is."""
    if job.tool_call is None:
        return {"role": "assistant", "content": text}
    call = {"id": job.tool_call.id, "type": "function", "function": {"name": job.tool_call.name, "arguments": text}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def head(job: Job, chat: bool) -> JSON:
    obj = "chat.completion.chunk" if chat else "text_completion"
    return {"id": job.id, "object": obj, "created": job.created, "model": job.model}


def content(chat: bool, text: str, role: bool = False) -> JSON:
    if not chat:
        return {"text": text}
    return {"delta": {"role": "assistant", "content": text} if role else {"content": text}}


def call_delta(job: Job, text: str, first: bool) -> JSON:
    """A piece of a streamed tool call's arguments: OpenAI's first delta carries the call's id, type and
    name (and the role, with no content), the later ones their arguments alone."""
    assert job.tool_call is not None
    ident = {"id": job.tool_call.id, "type": "function"} if first else {}
    fn = {"name": job.tool_call.name, "arguments": text} if first else {"arguments": text}
    delta: JSON = {"role": "assistant", "content": None} if first else {}
    return {"delta": delta | {"tool_calls": [{"index": 0, **ident, "function": fn}]}}


def choice_chunks(job: Job, chat: bool, token_key: str | None = None, finish_apart: bool = True) -> list[JSON]:
    """Each choice in turn: one chunk per token that adds text (``token_key``: the token id under that
    key), the finish on a chunk of its own (``finish_apart``) or on the last content chunk."""
    top, out = head(job, chat), []
    for i, c in enumerate(job.choices):
        steps = [s for s in c.steps if s.text]
        for j, step in enumerate(steps):
            last = j == len(steps) - 1 and not finish_apart
            piece = call_delta(job, step.text, j == 0) if chat and job.tool_call else content(chat, step.text, j == 0)
            choice: JSON = {"index": i, **piece}
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


# OpenAI's reasoning models, by their names' families (o1, o3, o4-mini, gpt-5...), and the efforts
# every one of them takes: they refuse a chat's ``max_tokens`` ("Use 'max_completion_tokens'
# instead"), and every other model refuses ``reasoning_effort`` (400, param named).
REASONING_MODELS: Final = ("o1", "o3", "o4", "gpt-5")
EFFORTS: Final = ("low", "medium", "high")
UNSUPPORTED: Final = "Unsupported parameter: '{}' is not supported with this model."


def read(body: JSON) -> JSON:
    """A chat body as OpenAI's API judges it by its model: the reasoning models' rules."""
    if "messages" not in body:
        return body
    reasoning = str(body.get("model", "")).startswith(REASONING_MODELS)
    if reasoning and "max_tokens" in body:
        message = UNSUPPORTED.format("max_tokens") + " Use 'max_completion_tokens' instead."
        raise ApiError(400, message, "max_tokens")
    effort = body.get("reasoning_effort")
    if effort is not None and not reasoning:
        raise ApiError(400, UNSUPPORTED.format("reasoning_effort"), "reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise ApiError(400, f"Unsupported value: 'reasoning_effort' does not support '{effort}' with this model.")
    return body


# OpenAI's API sits behind Cloudflare, which sets these on every answer (per-client state: a gateway
# must not hand one team's cookies to the next team's requests).
COOKIES: Final = (("Set-Cookie", "__cf_bm=bm; Path=/; HttpOnly"), ("Set-Cookie", "_cfuvid=uvid; Path=/; HttpOnly"))

WIRE: Final = Wire("openai", "/v1", body, chunks, error, read, base_suffix="/v1", headers=COOKIES)

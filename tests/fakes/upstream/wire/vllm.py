"""vLLM's OpenAI-compatible server (0.32+, ``shared/reference/vllm.md`` §3): whole bodies, one chunk per
engine step, legacy and chat logprobs, ``return_token_ids``, the usage chunk, and its error envelope."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from http import HTTPStatus
from typing import Any, Final

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import Job
from tests.fakes.upstream.model import MAX_MODEL_LEN, Step, TokenLogprob
from tests.fakes.upstream.wire.base import JSON, Chunk, Wire, openai_error

ERROR_TYPES: Final = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError", 500: "InternalServerError"}


def legacy_logprobs(entries: Sequence[TokenLogprob | None], offset: int) -> JSON:
    out: JSON = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    for entry in entries:
        if entry is None:
            continue
        out["text_offset"].append(offset)
        out["token_logprobs"].append(entry.logprob)
        out["tokens"].append(entry.token)
        out["top_logprobs"].append(dict(entry.top) if entry.logprob is not None else None)
        offset += len(entry.token)
    return out


def chat_logprobs(entries: Sequence[TokenLogprob], k: int) -> JSON:
    def item(token: str, lp: float | None) -> JSON:
        return {"token": token, "logprob": lp, "bytes": list(token.encode())}

    return {"content": [item(e.token, e.logprob) | {"top_logprobs": [item(*t) for t in e.top[:k]]} for e in entries]}


def completion_logprob_entries(job: Job, index: int, steps: Sequence[Step], echo: bool) -> list[TokenLogprob | None]:
    prompt = list(job.prompt_logprobs[index // job.n]) if echo and job.prompt_logprobs else []
    return [*prompt, *(s.logprob for s in steps)]


def completion_body(job: Job) -> JSON:
    choices = []
    for i, c in enumerate(job.choices):
        prompt = job.prompt_of(i)
        entries = completion_logprob_entries(job, i, c.steps, job.echo)
        choices.append(
            {
                "index": i,
                "text": (prompt.text if job.echo else "") + c.text,
                "logprobs": legacy_logprobs(entries, 0) if job.logprobs is not None else None,
                "finish_reason": c.steps[-1].finish_reason,
                "stop_reason": c.steps[-1].stop_reason,
                "token_ids": c.token_ids if job.token_ids else None,
                "prompt_logprobs": None,
                "prompt_token_ids": prompt.ids if job.token_ids else None,
            }
        )
    head = {"id": job.id, "object": "text_completion", "created": job.created, "model": job.model, "choices": choices}
    tail = {"service_tier": None, "system_fingerprint": None, "usage": job.usage(), "kv_transfer_params": None}
    return head | tail


def chat_body(job: Job) -> JSON:
    choices = []
    for i, c in enumerate(job.choices):
        message: JSON = {"role": job.role, "content": job.echo_text + c.text, "refusal": None, "annotations": None}
        message |= {"audio": None, "function_call": None, "tool_calls": [], "reasoning": None}
        if job.tool_call is not None:
            call = {"id": job.tool_call.id, "type": "function"}
            message |= {
                "content": None,
                "tool_calls": [call | {"function": {"name": job.tool_call.name, "arguments": c.text}}],
            }
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": chat_logprobs(c.logprobs, job.logprobs) if job.logprobs is not None else None,
                "finish_reason": c.steps[-1].finish_reason,
                "stop_reason": c.steps[-1].stop_reason,
                "token_ids": c.token_ids if job.token_ids else None,
            }
        )
    head = {"id": job.id, "object": "chat.completion", "created": job.created, "model": job.model, "choices": choices}
    tail = {"service_tier": None, "system_fingerprint": None, "usage": job.usage(), "prompt_logprobs": None}
    return head | tail | {"prompt_token_ids": job.prompts[0].ids if job.token_ids else None, "kv_transfer_params": None}


def interleave(job: Job) -> Iterator[tuple[int, int, Step]]:
    """Choice steps in engine order: step t of every choice before step t + 1 of any."""
    for pos in range(max(len(c.steps) for c in job.choices)):
        for i, c in enumerate(job.choices):
            if pos < len(c.steps):
                yield i, pos, c.steps[pos]


def chunk(job: Job, obj: str, choice: JSON, completed: int | None, **extra: Any) -> Chunk:
    """One stream event; ``completed`` is the choice's token count so far (None: not a token chunk)."""
    body = {"id": job.id, "object": obj, "created": job.created, "model": job.model, "choices": [choice]} | extra
    if job.continuous_usage:
        prompt = len(job.prompt_of(choice["index"]).ids)
        done = completed or 0
        body["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt + done, "completion_tokens": done}
    elif job.include_usage:
        # OpenAI's shape; vLLM leaves the key out of these chunks altogether.
        body["usage"] = None
    return Chunk(body, completed is not None)


def usage_chunk(job: Job, obj: str) -> Iterator[Chunk]:
    if job.include_usage:
        head = {"id": job.id, "object": obj, "created": job.created, "model": job.model}
        yield Chunk(head | {"choices": [], "usage": job.usage()}, False)


def completion_chunks(job: Job) -> Iterator[Chunk]:
    offsets = [0] * len(job.choices)
    for i, pos, step in interleave(job):
        prompt, echo = job.prompt_of(i), job.echo and pos == 0
        text = (prompt.text if echo else "") + step.text
        entries = completion_logprob_entries(job, i, [step], echo)
        choice = {
            "index": i,
            "text": text,
            "logprobs": legacy_logprobs(entries, offsets[i]) if job.logprobs is not None else None,
            "finish_reason": step.finish_reason,
            "stop_reason": step.stop_reason,
            "prompt_token_ids": prompt.ids if job.token_ids and pos == 0 else None,
            "token_ids": [step.token_id] if job.token_ids else None,
        }
        offsets[i] += len(text)
        yield chunk(job, "text_completion", choice, pos + 1)
    yield from usage_chunk(job, "text_completion")


def chat_chunks(job: Job) -> Iterator[Chunk]:
    obj, first = "chat.completion.chunk", {"prompt_token_ids": job.prompts[0].ids} if job.token_ids else {}
    for i in range(len(job.choices)):
        delta = {"role": job.role, "content": ""}
        yield chunk(job, obj, {"index": i, "delta": delta, "logprobs": None, "finish_reason": None}, None, **first)
    for i in range(len(job.choices) if job.echo_text else 0):
        yield chunk(
            job, obj, {"index": i, "delta": {"content": job.echo_text}, "logprobs": None, "finish_reason": None}, None
        )
    for i, pos, step in interleave(job):
        lp = (
            chat_logprobs([step.logprob], job.logprobs)
            if step.logprob is not None and job.logprobs is not None
            else None
        )
        delta: JSON = {"content": step.text}
        if job.tool_call is not None:  # vLLM's tool parsers: id, type and name on the call's first delta
            fn = {"name": job.tool_call.name, "arguments": step.text} if pos == 0 else {"arguments": step.text}
            head = {"id": job.tool_call.id, "type": "function"} if pos == 0 else {}
            delta = {"tool_calls": [{"index": 0, **head, "function": fn}]}
        choice = {"index": i, "delta": delta, "logprobs": lp, "finish_reason": step.finish_reason}
        choice |= {"stop_reason": step.stop_reason} if step.finish_reason else {}
        yield chunk(job, obj, choice | {"token_ids": [step.token_id] if job.token_ids else None}, pos + 1)
    yield from usage_chunk(job, obj)


def error(exc: ApiError) -> JSON:
    if exc.status == 401:  # vLLM's --api-key answers in OpenAI's words, not its own envelope
        return openai_error(exc, code="invalid_api_key")
    kind = ERROR_TYPES.get(exc.status) or HTTPStatus(exc.status).phrase.replace(" ", "") + "Error"
    return {"error": {"message": exc.message, "type": kind, "param": exc.param, "code": exc.status}}


WIRE: Final = Wire(
    "vllm",
    "/v1",
    lambda job, chat: chat_body(job) if chat else completion_body(job),
    lambda job, chat: chat_chunks(job) if chat else completion_chunks(job),
    error,
    base_suffix="/v1",
    strict_models=True,
    context=MAX_MODEL_LEN,
)

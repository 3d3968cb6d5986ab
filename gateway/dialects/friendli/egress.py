"""The internal request → a FriendliAI upstream body (current generation, seed 000), and Friendli's
answers → internal ones, including the 2024 stream (``token_sampled`` / ``complete`` events) that
older Friendli Container deployments still send (dialects.md §2.7).

Translations (dialects.md §6): SGP/vLLM ``choice`` constraints become a regex alternation, since
Friendli has no choice type; a JSON schema goes out as ``json_schema.schema`` (an object); seeds per
choice go out as Friendli's seed list; an adapter is addressed as ``ENDPOINT:ADAPTER``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import UnsupportedFeature
from gateway.core.request import Feature, InternalRequest, Operation, Sampling, StructuredOutput
from gateway.core.response import Completion, Delta, Finish, FinishReason, StreamEvent, StreamStart, Usage, UsageReport
from gateway.dialects.common import usage_from
from gateway.dialects.openai import chunks
from gateway.dialects.openai import egress as oai

JSON = Any
F = Feature

FRIENDLI_FEATURES = frozenset(
    {F.BATCH_PROMPT, F.TOKEN_PROMPT, F.N, F.STOP, F.LOGPROBS, F.SEED, F.SEED_PER_CHOICE, F.TOOLS, F.REASONING}
    | {F.TOP_K, F.MIN_P, F.XTC, F.REPETITION_PENALTY, F.NO_REPEAT_NGRAM, F.ENCODER_PENALTIES, F.MIN_TOKENS}
    | {F.MAX_TOTAL_TOKENS, F.MIN_TOTAL_TOKENS, F.STOP_TOKEN_IDS, F.STOP_TOKEN_SEQUENCES, F.BAD_WORDS}
    | {F.BAD_WORD_TOKENS, F.FORCED_OUTPUT, F.EMBEDDING_REPLACEMENT, F.ADAPTER}
    | {F.JSON_OBJECT, F.JSON_SCHEMA, F.REGEX, F.CHOICE, F.TOKEN_IDS}  # answers carry their tokens
)


def choice_regex(choices: list[str]) -> str:
    """``guided_choice`` as a Friendli regex: an escaped alternation, no anchors (Friendli refuses them,
    dialects.md §2.5)."""
    return "(" + "|".join(re.escape(c) for c in choices) + ")"


def response_format(so: StructuredOutput | None) -> JSON:
    if so is None:
        return None
    if so.kind == "json_object":
        return {"type": "json_object"}
    if so.kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"schema": so.value}}
    if so.kind == "regex":
        return {"type": "regex", "schema": so.value}
    return {"type": "regex", "schema": choice_regex(list(so.value))}


def _prompt(req: InternalRequest, body: dict[str, JSON], target: str) -> None:
    items = req.prompts
    if all(isinstance(p, str) for p in items):
        body["prompt"] = items[0] if len(items) == 1 else list(items)
    elif len(items) == 1:
        body["tokens"] = list(items[0])
    else:
        # Friendli takes one token-id prompt per request, and no mixed batches.
        raise UnsupportedFeature("prompt", target, "a batch of token-id prompts")


def _sampling(s: Sampling, body: dict[str, JSON]) -> None:
    plain: dict[str, JSON] = {
        "max_tokens": s.max_tokens,
        "max_total_tokens": s.max_total_tokens,
        "min_tokens": s.min_tokens,
        "min_total_tokens": s.min_total_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "min_p": s.min_p,
        "xtc_threshold": s.xtc_threshold,
        "xtc_probability": s.xtc_probability,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "repetition_penalty": s.repetition_penalty,
        "no_repeat_ngram": s.no_repeat_ngram,
        "encoder_repetition_penalty": s.encoder_repetition_penalty,
        "encoder_no_repeat_ngram": s.encoder_no_repeat_ngram,
        "logprobs": s.logprobs,
        "response_format": response_format(s.structured),
    }
    body.update((k, v) for k, v in plain.items() if v is not None)
    if s.n > 1:
        body["n"] = s.n
    if s.seeds:
        body["seed"] = list(s.seeds) if len(s.seeds) > 1 else s.seeds[0]
    lists: dict[str, JSON] = {
        "stop": list(s.stop),
        "stop_tokens": [{"tokens": list(t)} for t in s.stop_token_sequences],
        "eos_token": list(s.eos_token_ids),
        "bad_words": list(s.bad_words),
        "bad_word_tokens": [{"tokens": list(t)} for t in s.bad_word_tokens],
        "forced_output_tokens": list(s.forced_output_tokens),
    }
    body.update((k, v) for k, v in lists.items() if v)


def encode(req: InternalRequest, model: str, target: str) -> dict[str, JSON]:
    body: dict[str, JSON] = {"model": f"{model}:{req.adapter}" if req.adapter else model}
    if req.operation is Operation.CHAT:
        chat = oai.encode(req, model)
        for key in ("messages", "tools", "tool_choice", "parallel_tool_calls", "logit_bias"):
            if key in chat:
                body[key] = chat[key]
        if req.chat is not None and req.chat.reasoning:
            body.update(req.chat.reasoning)
    else:
        _prompt(req, body, target)
    _sampling(req.sampling, body)
    if req.operation is Operation.CHAT and req.sampling.logprobs is not None:
        body["logprobs"] = True  # chat takes OpenAI's bool + top_logprobs
        body["top_logprobs"] = req.sampling.logprobs
    if req.embedding_replacement is not None:
        body["token_index_to_replace"] = list(req.embedding_replacement.positions)
        body["embedding_to_replace"] = list(req.embedding_replacement.values)
    body["stream"] = req.stream
    if req.stream:
        body["stream_options"] = {"include_usage": True}
    return body


def finish_2024(choice: JSON, max_tokens: int | None) -> FinishReason:
    """The 2024 API reports no finish reason (dialects.md §6.12): a choice that used all of
    ``max_tokens`` stopped on length, any other stopped on its own."""
    given = chunks.finish_from(choice.get("finish_reason"))
    if given is not None:
        return given
    tokens = choice.get("tokens")
    if max_tokens is not None and isinstance(tokens, list) and len(tokens) >= max_tokens:
        return "length"
    return "stop"


class FriendliReader(chunks.ChunkDecoder):
    """Friendli's current stream is OpenAI's plus a per-chunk ``token``; the 2024 stream carries its
    event name inside the JSON and ends with one ``complete`` object holding usage."""

    __slots__ = ("max_tokens",)

    def __init__(self, request: InternalRequest) -> None:
        super().__init__(request.operation, choices=request.choice_count)
        self.max_tokens = request.sampling.max_tokens

    def decode(self, data: JSON) -> list[StreamEvent]:
        event = data.get("event") if isinstance(data, dict) else None
        if event is None:
            return super().decode(data)
        out: list[StreamEvent] = []
        if not self.started:
            self.started = True
            out.append(StreamStart("", 0, "", None))
        if event == "token_sampled":
            token = data.get("token")
            out.append(Delta(int(data.get("index", 0)), data.get("text") or "", (token,) if token is not None else ()))
        elif event == "complete":
            for c in data.get("choices") or ():
                out.append(Finish(int(c.get("index", 0)), finish_2024(c, self.max_tokens), c.get("seed")))
            self.finished = True
            self.usage = usage_from(data.get("usage")) or self.usage
        return out


@dataclass(frozen=True, slots=True)
class FriendliWire:
    """A Friendli serverless, dedicated or container base URL (``.../serverless``, ``.../dedicated``,
    or a container root): the adapter appends ``/v1/completions``."""

    name: str = "friendli"
    features: frozenset[Feature] = FRIENDLI_FEATURES
    extras: frozenset[Feature] = frozenset()
    done_sentinel: bool = True

    def path(self, operation: Operation) -> str:
        return "/v1/chat/completions" if operation is Operation.CHAT else "/v1/completions"

    def headers(self, key: str | None, team: str | None, request: InternalRequest) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if team:
            headers["X-Friendli-Team"] = team
        return headers

    def encode(self, request: InternalRequest, model: str) -> dict[str, JSON]:
        return encode(request, model, self.name)

    def decode(self, data: JSON, request: InternalRequest) -> Completion:
        completion = oai.decode(data, request.operation)
        for choice, raw in zip(completion.choices, data["choices"], strict=True):
            choice.finish_reason = finish_2024(raw, request.sampling.max_tokens)
        if completion.usage is None:
            completion.usage = Usage()
        return completion

    def reader(self, request: InternalRequest) -> FriendliReader:
        return FriendliReader(request)


FRIENDLI_WIRE = FriendliWire()
__all__ = ["FRIENDLI_WIRE", "FriendliWire", "UsageReport"]

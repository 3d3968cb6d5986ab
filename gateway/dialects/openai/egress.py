"""The internal request → an OpenAI/vLLM upstream body, and that upstream's answers → internal ones.

vLLM's extensions (vllm.md §1; ``vllm_fields``) are written only when the request uses them; the core has already
refused features the target does not declare, so a plain OpenAI target never receives them. The
removed ``guided_*`` fields are never written: vLLM ≥ 0.12 ignores them silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import UpstreamMalformed
from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import Choice, Completion
from gateway.dialects.common import logprobs_from, openai_headers, usage_from
from gateway.dialects.end_user import openai_user
from gateway.dialects.openai import embeddings
from gateway.dialects.openai.chunks import ChunkDecoder, finish_from, stop_string
from gateway.dialects.openai.openai_fields import CHAT_LENGTH, OPENAI_EXTRAS, openai_reasoning
from gateway.dialects.openai.schema import STREAM_FORMAT
from gateway.dialects.openai.vllm_fields import (
    VLLM_FEATURES,
    VLLM_PLUGIN_FEATURES,
    anthropic_reasoning,
    asks_token_ids,
    long_stops,
    prompt_logprobs_from,
    trim_forced_ends,
    vllm_ranges,
    vllm_xargs,
)

JSON = Any
F = Feature

OPENAI_FEATURES = frozenset(
    {F.BATCH_PROMPT, F.TOKEN_PROMPT, F.N, F.BEST_OF, F.STOP, F.LOGIT_BIAS, F.LOGPROBS, F.ECHO, F.SUFFIX, F.SEED}
    | {F.JSON_OBJECT, F.JSON_SCHEMA, F.TOOLS, F.AUDIO, F.PREDICTION, F.REASONING, F.EXTRA_BODY, F.EXTRA_HEADERS}
)
STRUCTURED_KEYS = {
    "json_schema": "json",
    "json_object": "json_object",
    "regex": "regex",
    "choice": "choice",
    "grammar": "grammar",
}


def _prompt(req: InternalRequest) -> JSON:
    if len(req.prompts) == 1:
        p = req.prompts[0]
        return p if isinstance(p, str) else list(p)
    return [p if isinstance(p, str) else list(p) for p in req.prompts]


def _messages(req: InternalRequest) -> list[dict[str, JSON]]:
    out = []
    for m in req.messages:
        msg: dict[str, JSON] = {"role": m.role}
        if m.content is not None:
            msg["content"] = m.content if isinstance(m.content, str) else list(m.content)
        for key in ("name", "tool_call_id"):
            if getattr(m, key) is not None:
                msg[key] = getattr(m, key)
        if m.tool_calls:
            msg["tool_calls"] = list(m.tool_calls)
        if m.reasoning is not None:  # vLLM's chat templates read an assistant turn's thinking here
            msg["reasoning"] = m.reasoning
        out.append(msg)
    return out


PLAIN_SAMPLING = (
    "max_tokens",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
    "suffix",
)


def _sampling(req: InternalRequest, body: dict[str, JSON]) -> None:
    s = req.sampling
    chat = req.operation is Operation.CHAT
    for name in PLAIN_SAMPLING:  # same name both sides, sent when set
        value = getattr(s, name)
        if value is not None:
            body[name] = value
    if s.beam is not None:  # vLLM returns every beam, best first; the decoder keeps the best
        body["use_beam_search"] = True
        body["n"] = s.beam.num_beams
        # A deterministic search ignores temperature (Friendli's, as Hugging Face's beam_search). vLLM's
        # steps sample a token at the given temperature and add it to the beam's candidates: only at 0
        # is that the most likely one, already among them.
        body["temperature"] = 0.0
        if s.beam.length_penalty is not None:
            body["length_penalty"] = s.beam.length_penalty
    elif s.n > 1:
        body["n"] = s.n
    if s.best_of is not None and s.best_of > s.n:
        body["best_of"] = s.best_of
    if s.seeds:
        body["seed"] = s.seeds[0]
    if s.stop:
        body["stop"] = list(s.stop)
    stop_ids = list(s.eos_token_ids) + [seq[0] for seq in s.stop_token_sequences if len(seq) == 1]
    if stop_ids:
        body["stop_token_ids"] = stop_ids
    if s.bad_words:
        body["bad_words"] = list(s.bad_words)
    if s.ignore_eos:
        body["ignore_eos"] = True
    if s.include_stop_str_in_output:
        body["include_stop_str_in_output"] = True
    if s.logit_bias:
        body["logit_bias"] = {str(k): v for k, v in s.logit_bias.items()}
    if s.logprobs is not None:
        if chat:
            body["logprobs"] = True
            body["top_logprobs"] = s.logprobs
        else:
            body["logprobs"] = s.logprobs
    if s.echo:
        body["echo"] = True
    if s.prompt_logprobs is not None:
        if req.stream:  # vLLM refuses prompt_logprobs on streams, but streams them for an echo
            body["echo"] = True  # with logprobs, on each choice's first chunk (ChunkDecoder splits them)
            body.setdefault("logprobs", 0)
        else:
            body["prompt_logprobs"] = s.prompt_logprobs
    if s.structured is not None:
        value = True if s.structured.kind == "json_object" else s.structured.value
        body["structured_outputs"] = {STRUCTURED_KEYS[s.structured.kind]: value}
    xargs = vllm_xargs(s)
    if xargs:
        body["vllm_xargs"] = xargs


Reasoning = Callable[[Mapping[str, JSON]], dict[str, JSON]]  # a wire's reasoning fields (``chat.reasoning``)


def encode(
    req: InternalRequest, model: str, *, token_ids: bool = False, reasoning: Reasoning = dict
) -> dict[str, JSON]:
    """``reasoning``: how the wire writes the request's reasoning fields; as they came by default (no
    Anthropic thinking or effort reaches a wire without them: ``fit`` drops them)."""
    body: dict[str, JSON] = {"model": model}
    if req.operation is Operation.CHAT:
        body["messages"] = _messages(req)
        chat = req.chat
        if chat is not None:
            if chat.tools:
                body["tools"] = list(chat.tools)
            if chat.tool_choice is not None:
                body["tool_choice"] = chat.tool_choice
            if chat.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = chat.parallel_tool_calls
            if chat.reasoning:
                body.update(reasoning(chat.reasoning))
    else:
        body["prompt"] = _prompt(req)
    _sampling(req, body)
    if req.user is not None:
        body["user"] = openai_user(req.user)
    if asks_token_ids(req, token_ids):
        body["return_token_ids"] = True
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if Feature.PREFILL in req.features:  # vLLM's chat template continues the final assistant message
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    if req.extra_body:
        body.update(req.extra_body)
    return body


# --- answers -------------------------------------------------------------------------------------


def decode(data: JSON, operation: Operation, prompt_logprobs: bool = False, beam: bool = False) -> Completion:
    """``prompt_logprobs``: the answer's prompt logprobs open each choice's logprobs (OctoAI's
    ``loglikelihood``); ``beam``: vLLM's beams, best first, become the one answer (Friendli 2024)."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise UpstreamMalformed("upstream answer is not a completion object")
    chat = operation is Operation.CHAT
    choices: list[Choice] = []
    for i, c in enumerate(data["choices"]):
        if chat:
            msg = c.get("message") or {}
            text, role, tools = msg.get("content"), msg.get("role"), msg.get("tool_calls") or None
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        else:
            text, role, tools, reasoning = c.get("text"), None, None, None
        if beam and choices:
            break
        raw = c.get("logprobs")
        lps = logprobs_from(raw) if raw is not None else None
        if prompt_logprobs:  # chat answers carry them once, at the top
            steps = c.get("prompt_logprobs") or data.get("prompt_logprobs")
            ids = c.get("prompt_token_ids") or data.get("prompt_token_ids")
            lps = prompt_logprobs_from(steps, ids) + (lps or [])
        choices.append(
            Choice(  # positional, in field order: one decode per request
                int(c.get("index", i)),
                text or "",
                finish_from(c.get("finish_reason")) or "stop",
                c.get("token_ids") or c.get("tokens"),
                lps,
                c.get("seed"),
                role,
                tools,
                reasoning,
                stop_string(c),
            )
        )
    return Completion(
        id=str(data.get("id") or ""),
        created=int(data.get("created") or 0),
        model=str(data.get("model") or ""),
        choices=choices,
        usage=usage_from(data.get("usage")),
        system_fingerprint=data.get("system_fingerprint"),
    )


@dataclass(frozen=True, slots=True)
class OpenAIWire:
    """OpenAI's API (``openai``) or a ``vllm serve`` replica (``vllm``, which also returns output token
    ids, needed by Friendli clients). ``reasoning`` writes the request's reasoning fields, ``length``
    names a chat answer's length bound: each vendor's own (``openai_fields``, ``vllm_fields``)."""

    features: frozenset[Feature]
    token_ids: bool = False
    done_sentinel: bool = True
    extras: frozenset[Feature] = frozenset()
    reasoning: Reasoning = dict
    length: str = "max_tokens"

    def path(self, operation: Operation) -> str:
        return PATHS[operation]

    def headers(self, key: str | None, team: str | None, request: InternalRequest) -> dict[str, str]:
        return openai_headers(key, team, request)

    def encode(self, request: InternalRequest, model: str) -> dict[str, JSON]:
        if request.operation is Operation.EMBEDDING:
            return embeddings.encode(request, model)
        if self.token_ids:
            vllm_ranges(request)
        body = encode(request, model, token_ids=self.token_ids, reasoning=self.reasoning)
        if self.length != "max_tokens" and request.operation is Operation.CHAT and "max_tokens" in body:
            body[self.length] = body.pop("max_tokens")
        if self.token_ids and request.stream and not self.relayed(request):
            # vLLM's usage on every chunk: a stream the client cuts is settled by vLLM's own count
            # (``StreamProgress``). Asked only where every chunk is decoded anyway: a relayed chunk
            # carrying usage would have to be decoded too.
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        total = request.sampling.max_total_tokens
        if total is not None and "max_tokens" not in body:
            # vLLM's completion default is 16 new tokens (null too); the total_length plugin ends
            # generation at the total. With token ids the room is known exactly; for text the total
            # itself bounds the new tokens (vLLM refuses it only if prompt + total exceed the context).
            if all(not isinstance(p, str) for p in request.prompts):
                body["max_tokens"] = max(1, total - max(len(p) for p in request.prompts))
            else:
                body["max_tokens"] = total
        return body

    def decode(self, data: JSON, request: InternalRequest) -> Completion:
        if request.operation is Operation.EMBEDDING:
            return embeddings.decode(data, len(request.prompts))
        s = request.sampling
        completion = decode(data, request.operation, s.prompt_logprobs is not None, s.beam is not None)
        stops = long_stops(s) if self.token_ids else ()
        return trim_forced_ends(completion, stops) if stops else completion

    def relayed(self, request: InternalRequest) -> bool:
        """The stream's plain chunks go to the client as they come (``ChunkDecoder.relay``)."""
        return request.relay == STREAM_FORMAT and not (self.token_ids and long_stops(request.sampling))

    def reader(self, request: InternalRequest) -> ChunkDecoder:
        s = request.sampling
        echoed = s.logprobs is not None if s.prompt_logprobs is not None and self.token_ids else None
        stops = long_stops(s) if self.token_ids else ()
        ids = asks_token_ids(request, self.token_ids)
        relayed = self.relayed(request)
        return ChunkDecoder(request.operation, relayed, ids, echoed, stops if ids else (), request.choice_count)


PATHS = {Operation.CHAT: "/chat/completions", Operation.COMPLETION: "/completions", Operation.EMBEDDING: "/embeddings"}
EMBEDDING_FEATURES = frozenset({F.EMBEDDING, F.DIMENSIONS})
OPENAI_WIRE = OpenAIWire(
    OPENAI_FEATURES | EMBEDDING_FEATURES, extras=OPENAI_EXTRAS, reasoning=openai_reasoning, length=CHAT_LENGTH
)
VLLM_WIRE = OpenAIWire(
    VLLM_FEATURES | EMBEDDING_FEATURES, token_ids=True, extras=VLLM_PLUGIN_FEATURES, reasoning=anthropic_reasoning
)

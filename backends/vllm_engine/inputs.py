"""An ``InternalRequest`` → what vLLM's engine takes, made the way ``vllm serve`` makes it.

The request is first written as the very body the HTTP ``vllm`` provider sends (``VLLM_WIRE.encode``),
then read by vLLM's own request models (``CompletionRequest``, ``ChatCompletionRequest``): their
validation, the model's generation-config defaults and ``to_sampling_params`` are the server's, so an
answer in-process is the answer ``vllm serve`` gives with the same engine arguments. Prompts are
rendered by vLLM's ``OnlineRenderer`` (chat template, tokenization, length checks), built as
``vllm serve`` builds it with its default flags (no tool or reasoning parser).

Friendli's embedding replacement is the one thing the server cannot express: the rendered token ids
become a mixed ``EmbedsPrompt`` (vLLM ≥ 0.32, engine flag ``enable_prompt_embeds``) whose replaced
positions take the client's rows. Positions index the token ids the model sees, BOS included.

Imports vLLM and torch; only ``backends.vllm_engine`` imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.serve.engine.protocol import ErrorResponse
from vllm.entrypoints.serve.utils.api_utils import get_max_tokens
from vllm.renderers.inputs.preprocess import extract_prompt_len
from vllm.renderers.online_renderer import OnlineRenderer

from gateway.core.errors import GatewayError, InvalidRequest, UpstreamFailed
from gateway.core.request import EmbeddingReplacement, Feature, InternalRequest, Operation
from gateway.dialects.openai.egress import VLLM_WIRE
from gateway.dialects.openai.vllm_fields import long_stops

# Only Friendli's dialect asks for embedding replacement (dialects.md §2): its field names.
POSITIONS_FIELD = "token_index_to_replace"


@dataclass(frozen=True, slots=True)
class Job:
    """One request, ready for ``AsyncLLM.generate``: one engine input and sampling parameters per
    prompt (completions may batch prompts; chat has one)."""

    chat: bool
    inputs: list[Any]  # vLLM EngineInput dicts
    params: list[Any]  # vLLM SamplingParams
    prompt_lens: list[int]
    n: int  # choices per prompt
    logprobs: int | None  # top alternatives asked per token (chat: top_logprobs)
    echo: bool
    role: str  # chat: the role of the answer's first delta
    prompt_logprobs: bool = False  # the prompt's own logprobs open each choice's (OctoAI loglikelihood)
    beam: bool = False  # ``params`` are vLLM's ``BeamSearchParams``: run by its beam search driver
    stops: tuple[tuple[int, ...], ...] = ()  # multi-token stops: their forced end token is taken out


def rejected(error: Any) -> GatewayError:
    """vLLM's ``ErrorResponse`` (what its server answers with) as our error."""
    info = error.error
    if int(info.code) >= 500:
        return UpstreamFailed(str(info.message))
    return InvalidRequest(str(info.message), param=info.param)


class Preparer:
    """Built once per engine, at start-up: the renderer and the model's defaults."""

    def __init__(self, engine: Any) -> None:
        mc = engine.model_config
        self.model_config = mc
        self.renderer = OnlineRenderer(
            model_config=mc,
            renderer=engine.renderer,
            request_logger=None,
            chat_template=None,
            chat_template_content_format="auto",
        )
        # As vLLM's serving classes compute them (entrypoints/openai/*/serving.py, 0.32).
        self.defaults: dict[str, Any] = mc.get_diff_sampling_param()
        self.override_max_tokens: int | None = (
            self.defaults.get("max_tokens")
            if mc.generation_config not in ("auto", "vllm")
            else getattr(mc, "override_generation_config", {}).get("max_new_tokens")
        )
        self.hidden_size = int(mc.get_hidden_size())
        self.dtype = mc.dtype
        self.renderer.warmup()  # compiles the chat template now, not on the first chat request

    async def prepare(self, request: InternalRequest, model: str) -> Job:
        """Raises vLLM's own errors (pydantic's, ``VLLMValidationError``...) and ours."""
        chat = request.operation is Operation.CHAT
        vreq, inputs = await self.render(request, VLLM_WIRE.encode(request, model))
        if request.embedding_replacement is not None:
            field = request.field_name(Feature.EMBEDDING_REPLACEMENT)
            mixed = [self.mixed_prompt(i, request.embedding_replacement, field) for i in inputs]
            inputs = list(await self.renderer.preprocess_cmpl(vreq, mixed))
        if chat:
            asked = vreq.max_completion_tokens if vreq.max_completion_tokens is not None else vreq.max_tokens
            logprobs = (vreq.top_logprobs or 0) if vreq.logprobs else None
            role = "assistant" if vreq.add_generation_prompt else str(vreq.messages[-1]["role"])
        else:
            asked, logprobs, role = vreq.max_tokens, vreq.logprobs, "assistant"
        lens = [int(extract_prompt_len(self.model_config, i)) for i in inputs]
        beam = not chat and bool(vreq.use_beam_search)  # as vLLM's server: completions only
        convert = vreq.to_beam_search_params if beam else vreq.to_sampling_params
        params = [convert(self.max_tokens(asked, n, vreq.truncate_prompt_tokens), self.defaults) for n in lens]
        echo = not chat and bool(vreq.echo)
        asked_prompt = request.sampling.prompt_logprobs is not None
        if asked_prompt and echo:  # a stream's prompt logprobs, asked as the HTTP provider asks (an echo):
            echo, logprobs = False, request.sampling.logprobs  # the prompt's logprobs alone, no text
        n, stops = int(vreq.n or 1), long_stops(request.sampling)
        return Job(chat, inputs, params, lens, n, logprobs, echo, role, asked_prompt, beam, stops)

    def max_tokens(self, asked: int | None, prompt_len: int, truncate: int | None) -> int:
        """The server's choice: the count asked for, within the model's room and generation config."""
        mc = self.model_config
        room = get_max_tokens(
            mc.max_model_len,
            asked,
            prompt_len,
            self.defaults,
            self.override_max_tokens,
            truncate_prompt_tokens=truncate,
        )
        return int(room)

    async def render(self, request: InternalRequest, body: dict[str, Any]) -> tuple[Any, list[Any]]:
        """vLLM's request model of the body and the engine inputs its renderer makes of it."""
        vreq: Any
        if request.operation is Operation.CHAT:
            vreq = ChatCompletionRequest.model_validate(body)
            rendered = await self.renderer.render_chat(vreq)
            if isinstance(rendered, ErrorResponse):
                raise rejected(rendered)
            return vreq, list(rendered[1])
        vreq = CompletionRequest.model_validate(body)
        rendered = await self.renderer.render_completion(vreq)
        if isinstance(rendered, ErrorResponse):
            raise rejected(rendered)
        return vreq, list(rendered)

    def mixed_prompt(self, engine_input: Any, rep: EmbeddingReplacement, field: str) -> dict[str, Any]:
        """The rendered prompt with the client's rows at its positions: vLLM takes a full-length
        tensor plus a mask, so rows at positions that keep their token are zeros (never read)."""
        ids = list(engine_input["prompt_token_ids"])
        rows, width = len(rep.positions), self.hidden_size
        if len(rep.values) != rows * width:
            raise InvalidRequest(
                f"'{field}' has {len(rep.values)} values; {rows} position(s) times hidden size {width} "
                f"= {rows * width} expected",
                param=field,
            )
        for p in rep.positions:
            if not 0 <= p < len(ids):
                raise InvalidRequest(
                    f"'{POSITIONS_FIELD}' has {p}, outside the prompt's {len(ids)} tokens", param=POSITIONS_FIELD
                )
        embeds = torch.zeros(len(ids), width, dtype=self.dtype)
        embeds[list(rep.positions)] = torch.tensor(rep.values, dtype=self.dtype).view(rows, width)
        replaced = set(rep.positions)
        return {
            "prompt_embeds": embeds,
            "prompt_token_ids": ids,
            "prompt_is_token_ids": [i not in replaced for i in range(len(ids))],
        }

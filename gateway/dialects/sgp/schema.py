"""Scale SGP request bodies (dialects.md §3; seed 001, scale-gp 0.1.0a58/a62, scale-gp-beta): OpenAI's
fields plus SGP's ``guided_*`` constraints, three max-token synonyms, ``stop_sequences``,
``return_token_log_probs``, the ``inference_*`` pass-throughs and the chat-only keys ``/v4/beta``
accepts on completions.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from gateway.core import caps
from gateway.dialects.common import (
    Bias,
    Body,
    Choices,
    ChoiceTexts,
    Logprobs,
    Name,
    Objects,
    Penalty,
    Seed,
    Temperature,
    Texts,
    TokenCount,
    TopK,
    Unit,
)
from gateway.dialects.openai.schema import ChatBody, ResponseFormat

JSON = Any


class Guided(Body):
    guided_json: dict[str, JSON] | None = None
    guided_regex: str | None = None
    guided_choice: ChoiceTexts | None = None
    guided_grammar: str | None = None
    include_stop_str_in_output: bool | None = None
    top_k: TopK | None = None
    inference_timeout: Annotated[float, Field(gt=0, le=caps.MAX_TIMEOUT_S)] | Name | None = None
    inference_extra_params: dict[str, JSON] | None = None
    inference_extra_headers: dict[str, str] | None = None


class SGPCompletionBody(Guided):
    model: Name
    prompt: str | Texts
    max_tokens: TokenCount | None = None
    max_completion_tokens: TokenCount | None = None
    max_new_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    stop: str | Texts | None = None
    stop_sequences: Texts | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, Bias] | None = None
    logprobs: bool | Logprobs | None = None
    top_logprobs: Logprobs | None = None
    return_token_log_probs: bool | None = None
    n: Choices | None = None
    best_of: Choices | None = None
    echo: bool | None = None
    seed: Seed | None = None
    suffix: str | None = None
    user: Name | None = None
    response_format: ResponseFormat | None = None
    stream: bool | None = None
    stream_options: dict[str, JSON] | None = None
    tools: Objects | None = None
    tool_choice: Name | dict[str, JSON] | None = None
    parallel_tool_calls: bool | None = None
    audio: dict[str, JSON] | None = None
    modalities: Texts | None = None
    prediction: dict[str, JSON] | None = None


class SGPChatBody(ChatBody, Guided):
    guided_decoding_backend: Name | None = None
    guided_whitespace_pattern: str | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, JSON] | None = None
    memory_strategy: dict[str, JSON] | None = None

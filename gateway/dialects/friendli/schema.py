"""FriendliAI request bodies, both generations (dialects.md §2; seeds 000 and 002; friendli-client
1.5.8 which sends every key, unset ones as ``null``).

The 2024 generation's keys (beam search, ``timeout_microseconds``, ``include_output_*``) are accepted
on every Friendli path: friendli-client still posts them to ``/serverless/v1/completions``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from gateway.dialects.common import Body, Part
from gateway.dialects.openai.schema import ChatBody, Penalty, StreamOptions, TokenIds

JSON = Any
Unit = Annotated[float, Field(ge=0, le=1)]

LEGACY_FIELDS = frozenset(
    {
        "timeout_microseconds",
        "num_beams",
        "length_penalty",
        "early_stopping",
        "beam_search_type",
        "beam_compat_pre_normalization",
        "beam_compat_no_post_normalization",
        "include_output_logits",
        "include_output_logprobs",
        "soft_prompts",
        "position_ids",
        "generation_offset",
    }
)


class TokenSequence(Part):
    tokens: TokenIds


class JsonSchemaWrapper(Part):
    schema_: dict[str, JSON] = Field(alias="schema")


class FriendliResponseFormat(Part):
    type: Literal["text", "json_object", "json_schema", "regex"]
    # 2024/Jan-2025: json_object carries the schema serialized as a string; regex its pattern.
    schema_: str | dict[str, JSON] | None = Field(None, alias="schema")
    json_schema: JsonSchemaWrapper | None = None


class FriendliCompletionBody(Body):
    model: str | None = None
    prompt: str | list[str] | None = None
    tokens: TokenIds | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_total_tokens: int | None = Field(None, ge=1)
    min_tokens: int | None = Field(None, ge=0)
    min_total_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: Unit | None = None
    xtc_threshold: Unit | None = None
    xtc_probability: Unit | None = None
    n: int | None = Field(None, ge=1)
    seed: int | list[int] | None = None
    stop: list[str] | None = None
    stop_tokens: list[TokenSequence] | None = None
    eos_token: TokenIds | None = None
    bad_words: list[str] | None = None
    bad_word_tokens: list[TokenSequence] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: float | None = Field(None, gt=0)
    no_repeat_ngram: int | None = Field(None, ge=1)
    encoder_repetition_penalty: float | None = Field(None, gt=0)
    encoder_no_repeat_ngram: int | None = Field(None, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)
    forced_output_tokens: TokenIds | None = None
    token_index_to_replace: TokenIds | None = None
    embedding_to_replace: list[float] | None = None
    response_format: FriendliResponseFormat | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # 2024 generation (seed 002)
    timeout_microseconds: int | None = Field(None, ge=1)
    num_beams: int | None = Field(None, ge=1, le=31)
    length_penalty: float | None = None
    early_stopping: bool | None = None
    beam_search_type: Literal["DETERMINISTIC", "NAIVE_SAMPLING", "STOCHASTIC"] | None = None
    beam_compat_pre_normalization: bool | None = None
    beam_compat_no_post_normalization: bool | None = None
    include_output_logits: bool | None = None
    include_output_logprobs: bool | None = None
    # gRPC-only in friendli-client (dialects.md §2.4); sent as null over HTTP
    soft_prompts: list[JSON] | None = None
    position_ids: list[int] | None = None
    generation_offset: int | None = None


class FriendliChatBody(ChatBody):
    response_format: FriendliResponseFormat | None = None  # type: ignore[assignment]
    top_k: int | None = Field(None, ge=0)
    min_p: Unit | None = None
    min_tokens: int | None = Field(None, ge=0)
    repetition_penalty: float | None = Field(None, gt=0)
    eos_token: TokenIds | None = None
    xtc_threshold: Unit | None = None
    xtc_probability: Unit | None = None
    timeout_microseconds: int | None = Field(None, ge=1)
    parse_reasoning: bool | None = None
    include_reasoning: bool | None = None
    reasoning_budget: int | None = None
    chat_template_kwargs: dict[str, JSON] | None = None

"""FriendliAI request bodies, both generations (dialects.md §2; seeds 000 and 002; friendli-client
1.5.8 which sends every key, unset ones as ``null``).

The 2024 generation's keys (beam search, ``timeout_microseconds``, ``include_output_*``) are accepted
on every Friendli path: friendli-client still posts them to ``/serverless/v1/completions``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from gateway.core import caps
from gateway.dialects.common import (
    Body,
    Choices,
    Items,
    Logprobs,
    MinTokens,
    Name,
    Ngram,
    Part,
    Penalty,
    Scale,
    Seed,
    Texts,
    TokenCount,
    TokenId,
    TokenIds,
    Unit,
    at_most,
)
from gateway.dialects.openai.schema import ChatBody, StreamOptions

JSON = Any
# Friendli documents no upper bound for its temperature (seed 000); this one is ours.
Temperature = Annotated[float, Field(ge=0, le=caps.MAX_SCALE)]
TopK = Annotated[int, Field(ge=0, le=caps.MAX_TOKEN_ID)]
Microseconds = Annotated[int, Field(ge=1, le=caps.MAX_TIMEOUT_S * 1_000_000)]

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


TokenSequences = Annotated[list[TokenSequence], Items]


class JsonSchemaWrapper(Part):
    schema_: dict[str, JSON] = Field(alias="schema")


class FriendliResponseFormat(Part):
    type: Literal["text", "json_object", "json_schema", "regex"]
    # 2024/Jan-2025: json_object carries the schema serialized as a string; regex its pattern.
    schema_: str | dict[str, JSON] | None = Field(None, alias="schema")
    json_schema: JsonSchemaWrapper | None = None


class FriendliCompletionBody(Body):
    model: Name | None = None
    prompt: str | Texts | None = None
    tokens: TokenIds | None = None
    max_tokens: TokenCount | None = None
    max_total_tokens: TokenCount | None = None
    min_tokens: MinTokens | None = None
    min_total_tokens: MinTokens | None = None
    temperature: Temperature | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: TopK | None = None
    min_p: Unit | None = None
    xtc_threshold: Unit | None = None
    xtc_probability: Unit | None = None
    n: Choices | None = None
    seed: Seed | Annotated[list[Seed], at_most(caps.MAX_CHOICES)] | None = None
    stop: Texts | None = None
    stop_tokens: TokenSequences | None = None
    eos_token: TokenIds | None = None
    bad_words: Texts | None = None
    bad_word_tokens: TokenSequences | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Scale | None = None
    no_repeat_ngram: Ngram | None = None
    encoder_repetition_penalty: Scale | None = None
    encoder_no_repeat_ngram: Ngram | None = None
    logprobs: Logprobs | None = None
    forced_output_tokens: TokenIds | None = None
    token_index_to_replace: TokenIds | None = None
    embedding_to_replace: Annotated[list[float], at_most(caps.MAX_TOKEN_IDS)] | None = None
    response_format: FriendliResponseFormat | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # 2024 generation (seed 002)
    timeout_microseconds: Microseconds | None = None
    num_beams: int | None = Field(None, ge=1, le=31)
    length_penalty: Annotated[float, Field(ge=-caps.MAX_SCALE, le=caps.MAX_SCALE)] | None = None
    early_stopping: bool | None = None
    beam_search_type: Literal["DETERMINISTIC", "NAIVE_SAMPLING", "STOCHASTIC"] | None = None
    beam_compat_pre_normalization: bool | None = None
    beam_compat_no_post_normalization: bool | None = None
    include_output_logits: bool | None = None
    include_output_logprobs: bool | None = None
    # gRPC-only in friendli-client (dialects.md §2.4); sent as null over HTTP
    soft_prompts: Annotated[list[JSON], Items] | None = None
    position_ids: Annotated[list[TokenId], at_most(caps.MAX_TOKEN_IDS)] | None = None
    generation_offset: TokenId | None = None


class FriendliChatBody(ChatBody):
    response_format: FriendliResponseFormat | None = None  # type: ignore[assignment]
    top_k: TopK | None = None
    min_p: Unit | None = None
    min_tokens: MinTokens | None = None
    repetition_penalty: Scale | None = None
    eos_token: TokenIds | None = None
    xtc_threshold: Unit | None = None
    xtc_probability: Unit | None = None
    timeout_microseconds: Microseconds | None = None
    parse_reasoning: bool | None = None
    include_reasoning: bool | None = None
    reasoning_budget: MinTokens | None = None
    chat_template_kwargs: dict[str, JSON] | None = None

"""OpenAI Responses request bodies (``POST /v1/responses``) as the openai SDK sends them (its
``types/responses/response_create_params.py``, openai 3.57.0).

Unknown top-level fields are refused by name, as every body is. Input items and tools are kept as
JSON here and read item by item in ``parse``: an item type the gateway does not model is refused
naming the item's index and type, not by a union's error on every member.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from gateway.dialects.common import Body, Items, Name, Objects, Part, Temperature, Texts, TokenCount, Unit

JSON = Any
# OpenAI's documented bounds on ``metadata``: 16 pairs, keys of 64 and values of 512 characters.
METADATA_PAIRS = 16
Metadata = Annotated[
    dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]], Field(max_length=METADATA_PAIRS)
]


class TextConfig(Part):
    format: dict[str, JSON] | None = None
    verbosity: Name | None = None


class ReasoningConfig(Part):
    effort: Name | None = None
    summary: Name | None = None
    generate_summary: Name | None = None


class ResponsesStreamOptions(Part):
    include_obfuscation: bool | None = None  # the gateway never pads: both values are honoured


class ResponsesBody(Body):
    model: Name
    input: str | Annotated[list[JSON], Items]
    instructions: str | None = None
    tools: Objects | None = None
    tool_choice: Name | dict[str, JSON] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    text: TextConfig | None = None
    metadata: Metadata | None = None
    user: Name | None = None
    truncation: Literal["auto", "disabled"] | None = None
    store: bool | None = None
    previous_response_id: Name | None = None
    stream: bool | None = None
    stream_options: ResponsesStreamOptions | None = None
    reasoning: ReasoningConfig | None = None
    include: Texts | None = None
    # OpenAI-platform fields: to targets that take an extra body (OpenAI), refused by name elsewhere
    service_tier: Name | None = None
    safety_identifier: Name | None = None
    prompt_cache_key: Name | None = None
    prompt_cache_retention: Name | None = None
    prompt_cache_options: dict[str, JSON] | None = None
    moderation: dict[str, JSON] | None = None
    # server-side features the gateway does not model: refused by name in ``parse``
    background: bool | None = None
    conversation: JSON = None
    prompt: JSON = None
    max_tool_calls: int | None = None
    top_logprobs: int | None = None
    context_management: list[JSON] | None = None
    image: dict[str, JSON] | None = None
    access_programs: dict[str, JSON] | None = None

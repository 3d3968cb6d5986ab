"""OpenAI request bodies as clients send them (dialects.md §1, clients.md §2), with the vLLM
extensions that vLLM's own OpenAI server accepts, so an OpenAI SDK pointed at the gateway can use
``extra_body`` the way it would against ``vllm serve``.

The chat body here is also the base of every other dialect's chat body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from gateway.dialects.common import Body, OpenPart, Part

JSON = Any
# The name both ends of a same-format stream share (``InternalRequest.relay``): an OpenAI-shaped
# client stream (OpenAI, SGP, Friendli, OctoAI) takes an OpenAI-compatible upstream's content chunks as
# they come, retouched in bytes where its style differs (``openai/relay.py``).
STREAM_FORMAT = "openai"
Penalty = Annotated[float, Field(ge=-2, le=2)]
TokenIds = list[Annotated[int, Field(ge=0)]]


class StreamOptions(Part):
    include_usage: bool | None = None
    # OpenAI pads chunks with random characters unless this is false; the gateway never pads, which
    # only saves bytes, so both values are honoured trivially.
    include_obfuscation: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM: usage on every chunk


class StructuredOutputs(Part):
    """vLLM's ``structured_outputs`` (the successor of the removed ``guided_*`` fields)."""

    json_: JSON = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None


class JsonSchemaSpec(OpenPart):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, JSON] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(OpenPart):
    type: Literal["text", "json_object", "json_schema", "regex"]
    json_schema: JsonSchemaSpec | None = None
    schema_: JSON = Field(None, alias="schema")  # Friendli (string or object), OctoAI (object)


class VLLMExtras(Body):
    """Sampling fields vLLM's OpenAI server accepts beyond OpenAI's (vllm.md §1)."""

    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0)
    min_tokens: int | None = Field(None, ge=0)
    stop_token_ids: TokenIds | None = None
    bad_words: list[str] | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    structured_outputs: StructuredOutputs | None = None
    return_token_ids: bool | None = None


class CompletionBody(VLLMExtras):
    model: str
    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1, le=128)
    best_of: int | None = Field(None, ge=1, le=128)
    stop: str | list[str] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool | None = None
    suffix: str | None = None
    seed: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None


class ChatMessageBody(OpenPart):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, JSON]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, JSON]] | None = None
    tool_call_id: str | None = None


class ChatBody(Body):
    """OpenAI chat, the common base of every dialect's chat body."""

    model: str
    messages: Annotated[list[ChatMessageBody], Field(min_length=1)]
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1, le=128)
    stop: str | list[str] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    seed: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[dict[str, JSON]] | None = None
    tool_choice: str | dict[str, JSON] | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None
    reasoning_effort: str | None = None


class OpenAIChatBody(ChatBody, VLLMExtras):
    # OpenAI-platform features with no meaning for other targets: forwarded by name to targets that
    # declare ``extra_body``, refused by name by the rest.
    functions: list[dict[str, JSON]] | None = None
    function_call: str | dict[str, JSON] | None = None
    metadata: dict[str, JSON] | None = None
    store: bool | None = None
    service_tier: str | None = None
    modalities: list[str] | None = None
    audio: dict[str, JSON] | None = None
    prediction: dict[str, JSON] | None = None
    web_search_options: dict[str, JSON] | None = None
    verbosity: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    chat_template_kwargs: dict[str, JSON] | None = None


PLATFORM_FIELDS = (
    "functions",
    "function_call",
    "metadata",
    "store",
    "service_tier",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
    "verbosity",
    "prompt_cache_key",
    "safety_identifier",
)

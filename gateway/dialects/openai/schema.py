"""OpenAI request bodies as clients send them (dialects.md §1, clients.md §2), with the vLLM
extensions that vLLM's own OpenAI server accepts, so an OpenAI SDK pointed at the gateway can use
``extra_body`` the way it would against ``vllm serve``.

The chat body here is also the base of every other dialect's chat body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Discriminator, Field, Tag

from gateway.dialects.common import (
    Bias,
    Body,
    Choices,
    ChoiceTexts,
    Items,
    Logprobs,
    MinTokens,
    Name,
    Objects,
    OpenPart,
    Part,
    Penalty,
    Scale,
    Seed,
    Temperature,
    Texts,
    TokenCount,
    TokenIds,
    TopK,
    Unit,
)

JSON = Any
# The name both ends of a same-format stream share (``InternalRequest.relay``): an OpenAI-shaped
# client stream (OpenAI, SGP, Friendli, OctoAI) takes an OpenAI-compatible upstream's content chunks as
# they come, retouched in bytes where its style differs (``openai/relay.py``).
STREAM_FORMAT = "openai"
Stop = str | Texts


def _prompt_kind(value: Any) -> str:
    """Which of the prompt's four shapes to validate: trying each on a long token list would cost
    one error object per token and member."""
    if not isinstance(value, list) or not value:
        return "text" if not isinstance(value, list) else "texts"
    first = value[0]
    return "texts" if isinstance(first, str) else "batch" if isinstance(first, list) else "ids"


Prompt = Annotated[
    Annotated[str, Tag("text")]
    | Annotated[Texts, Tag("texts")]
    | Annotated[TokenIds, Tag("ids")]
    | Annotated[Annotated[list[TokenIds], Items], Tag("batch")],
    Discriminator(_prompt_kind),
]


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
    choice: ChoiceTexts | None = None
    grammar: str | None = None
    json_object: bool | None = None


class JsonSchemaSpec(OpenPart):
    name: Name | None = None
    description: str | None = None
    schema_: dict[str, JSON] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(OpenPart):
    type: Literal["text", "json_object", "json_schema", "regex"]
    json_schema: JsonSchemaSpec | None = None
    schema_: JSON = Field(None, alias="schema")  # Friendli (string or object), OctoAI (object)


class VLLMExtras(Body):
    """Sampling fields vLLM's OpenAI server accepts beyond OpenAI's (vllm.md §1)."""

    top_k: TopK | None = None
    min_p: Unit | None = None
    repetition_penalty: Scale | None = None
    min_tokens: MinTokens | None = None
    stop_token_ids: TokenIds | None = None
    bad_words: Texts | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    structured_outputs: StructuredOutputs | None = None
    return_token_ids: bool | None = None


class CompletionBody(VLLMExtras):
    model: Name
    prompt: Prompt
    max_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    n: Choices | None = None
    best_of: Choices | None = None
    stop: Stop | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, Bias] | None = None
    logprobs: Logprobs | None = None
    echo: bool | None = None
    suffix: str | None = None
    seed: Seed | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: Name | None = None


Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
ROLES: frozenset[str] = frozenset(get_args(Role))


class ChatMessageBody(OpenPart):
    role: Role
    content: str | Objects | None = None
    name: Name | None = None
    tool_calls: Objects | None = None
    tool_call_id: Name | None = None


class ChatBody(Body):
    """OpenAI chat, the common base of every dialect's chat body."""

    model: Name
    messages: Annotated[list[ChatMessageBody], Field(min_length=1), Items]
    max_tokens: TokenCount | None = None
    max_completion_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    n: Choices | None = None
    stop: Stop | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, Bias] | None = None
    logprobs: bool | None = None
    top_logprobs: Logprobs | None = None
    response_format: ResponseFormat | None = None
    seed: Seed | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: Objects | None = None
    tool_choice: Name | dict[str, JSON] | None = None
    parallel_tool_calls: bool | None = None
    user: Name | None = None
    reasoning_effort: Name | None = None


class OpenAIChatBody(ChatBody, VLLMExtras):
    # OpenAI-platform features with no meaning for other targets: forwarded by name to targets that
    # declare ``extra_body``, refused by name by the rest.
    functions: Objects | None = None
    function_call: Name | dict[str, JSON] | None = None
    metadata: dict[str, JSON] | None = None
    store: bool | None = None
    service_tier: Name | None = None
    modalities: Texts | None = None
    audio: dict[str, JSON] | None = None
    prediction: dict[str, JSON] | None = None
    web_search_options: dict[str, JSON] | None = None
    verbosity: Name | None = None
    prompt_cache_key: Name | None = None
    prompt_cache_retention: Name | None = None
    prompt_cache_options: dict[str, JSON] | None = None
    moderation: dict[str, JSON] | None = None
    safety_identifier: Name | None = None
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
    "prompt_cache_retention",
    "prompt_cache_options",
    "moderation",
    "safety_identifier",
)


# Body keys that only other SDKs send on the shared ``/v1`` paths (dialects.md §7): ``select`` hands
# such a body to that dialect.
FRIENDLI_KEYS = frozenset(
    {
        "tokens",
        "max_total_tokens",
        "min_total_tokens",
        "stop_tokens",
        "eos_token",
        "bad_word_tokens",
        "no_repeat_ngram",
        "encoder_repetition_penalty",
        "encoder_no_repeat_ngram",
        "forced_output_tokens",
        "token_index_to_replace",
        "embedding_to_replace",
        "xtc_threshold",
        "xtc_probability",
        # the 2024 generation's keys, which friendli-client always sends (as null)
        "timeout_microseconds",
        "num_beams",
        "beam_search_type",
        "include_output_logits",
        "include_output_logprobs",
        "generation_offset",
    }
)
OCTOAI_KEYS = frozenset({"peft", "loglikelihood", "log_prompt"})

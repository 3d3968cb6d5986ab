"""The one internal request that every ingress dialect is parsed into.

Frozen, slotted and typed. Vendor-only features travel as explicit fields (``top_k``, ``xtc``,
``bad_words``...); each is named by a ``Feature`` so that a target which cannot honour it rejects the
request by name instead of silently ignoring it. ``fields`` remembers, for each feature the client
used, the name of the field the client wrote, so errors speak the client's own vocabulary.

What does not belong here: any wire format, any web framework, any vendor name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum
from random import getrandbits
from typing import Any, Literal

from gateway.core.records import record

JSON = Any
PromptItem = str | tuple[int, ...]


class Operation(StrEnum):
    COMPLETION = "completion"
    CHAT = "chat"
    EMBEDDING = "embedding"


class Feature(StrEnum):
    """Everything a request can ask of a target beyond plain text generation."""

    BATCH_PROMPT = "batch_prompt"
    TOKEN_PROMPT = "token_prompt"
    N = "n"
    BEST_OF = "best_of"
    TOP_K = "top_k"
    MIN_P = "min_p"
    XTC = "xtc"
    REPETITION_PENALTY = "repetition_penalty"
    NO_REPEAT_NGRAM = "no_repeat_ngram"
    ENCODER_PENALTIES = "encoder_penalties"
    MIN_TOKENS = "min_tokens"
    MAX_TOTAL_TOKENS = "max_total_tokens"
    MIN_TOTAL_TOKENS = "min_total_tokens"
    STOP = "stop"
    STOP_TOKEN_IDS = "stop_token_ids"
    STOP_TOKEN_SEQUENCES = "stop_token_sequences"
    INCLUDE_STOP_STR = "include_stop_str_in_output"
    TOKEN_IDS = "return_token_ids"  # the output's token ids, asked for by the client
    IGNORE_EOS = "ignore_eos"
    BAD_WORDS = "bad_words"
    BAD_WORD_TOKENS = "bad_word_tokens"
    LOGIT_BIAS = "logit_bias"
    LOGPROBS = "logprobs"
    PROMPT_LOGPROBS = "prompt_logprobs"
    ECHO = "echo"
    SUFFIX = "suffix"
    SEED = "seed"
    SEED_PER_CHOICE = "seed_per_choice"
    # Never asked for: a target that samples choice j of n with ``seed + j`` (vLLM's parallel sampling,
    # v1/engine/parallel_sampling.py, 0.32), which is then the seed that choice reports.
    CHILD_SEEDS = "child_seeds"
    FORCED_OUTPUT = "forced_output_tokens"
    EMBEDDING_REPLACEMENT = "embedding_replacement"
    JSON_OBJECT = "json_object"
    JSON_SCHEMA = "json_schema"
    REGEX = "regex"
    CHOICE = "choice"
    GRAMMAR = "grammar"
    BEAM_SEARCH = "beam_search"
    OUTPUT_LOGITS = "output_logits"
    ADAPTER = "adapter"
    TOOLS = "tools"
    AUDIO = "audio"
    PREDICTION = "prediction"
    REASONING = "reasoning"
    THINKING = "thinking"  # Anthropic's extended thinking (a budget of thinking tokens)
    EFFORT = "effort"  # Anthropic's output_config.effort (how many tokens the answer may spend)
    # Earlier turns' thinking sent back (Anthropic's thinking blocks): on a chat wire, the assistant
    # message's ``reasoning``, which vLLM's chat templates take (as vLLM's own /v1/messages passes it)
    THOUGHTS = "thoughts"
    # A final assistant turn the answer continues (Anthropic's prefill); a chat wire's final assistant
    # message is otherwise closed and answered with a new turn.
    PREFILL = "prefill"
    # What only Anthropic's own platform serves (server tools, its betas and platform fields): the
    # Anthropic client's body goes to an Anthropic target as it came (``InternalRequest.native``).
    ANTHROPIC_NATIVE = "anthropic_native"
    # What only OpenAI's own /v1/responses serves (hosted tools, item types the gateway does not
    # model, OpenAI's include/top_logprobs/max_tool_calls): the Responses body goes to it as it came.
    RESPONSES_NATIVE = "responses_native"
    EXTRA_BODY = "extra_body"
    EXTRA_HEADERS = "extra_headers"
    EMBEDDING = "embedding"  # vectors, not text: only targets that serve an embeddings API
    DIMENSIONS = "dimensions"  # an embedding's length chosen by the client


StructuredKind = Literal["json_object", "json_schema", "regex", "choice", "grammar"]


@record
class StructuredOutput:
    """One output constraint. ``value`` is a JSON schema (object), a pattern, a grammar or choices."""

    kind: StructuredKind
    value: JSON = None


@record
class BeamSearch:
    num_beams: int
    length_penalty: float | None = None
    early_stopping: bool | None = None
    search_type: str | None = None
    compat_pre_normalization: bool | None = None  # Friendli 2024's undocumented beam_compat_* knobs
    compat_no_post_normalization: bool | None = None


@record
class Sampling:
    """Generation controls. ``None`` always means "not asked for": the target's own default."""

    max_tokens: int | None = None
    max_total_tokens: int | None = None
    min_tokens: int | None = None
    min_total_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # None = off; Friendli's 0 and vLLM's -1 both map here
    min_p: float | None = None
    xtc_threshold: float | None = None
    xtc_probability: float | None = None
    n: int = 1
    best_of: int | None = None
    seeds: tuple[int, ...] | None = None  # one seed, or one per choice
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram: int | None = None
    encoder_repetition_penalty: float | None = None
    encoder_no_repeat_ngram: int | None = None
    logit_bias: Mapping[int, float] | None = None
    stop: tuple[str, ...] = ()
    stop_token_sequences: tuple[tuple[int, ...], ...] = ()
    eos_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    bad_words: tuple[str, ...] = ()
    bad_word_tokens: tuple[tuple[int, ...], ...] = ()
    logprobs: int | None = None  # top-k alternatives per token; 0 = the sampled token only
    prompt_logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    forced_output_tokens: tuple[int, ...] = ()
    structured: StructuredOutput | None = None
    beam: BeamSearch | None = None
    output_logits: bool = False


@record
class ChatMessage:
    role: str
    content: str | tuple[JSON, ...] | None
    name: str | None = None
    tool_calls: tuple[JSON, ...] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None  # an assistant turn's thinking, sent back (``Feature.THOUGHTS``)


@record
class ChatOptions:
    """Chat-only controls, forwarded as given to targets that declare the feature."""

    tools: tuple[JSON, ...] | None = None
    tool_choice: JSON = None
    parallel_tool_calls: bool | None = None
    reasoning: Mapping[str, JSON] | None = None  # reasoning_effort, chat_template_kwargs, ...


@record
class EmbeddingOptions:
    """An embeddings request's own controls (its inputs are ``InternalRequest.prompts``)."""

    dimensions: int | None = None
    base64: bool = False  # the client's vectors as base64 little-endian float32 (OpenAI's encoding_format)


@record
class EmbeddingReplacement:
    positions: tuple[int, ...]
    values: tuple[float, ...]  # flattened rows, len = len(positions) * hidden size


@record
class InternalRequest:
    operation: Operation
    model: str
    prompts: tuple[PromptItem, ...] = ()  # completions; a single prompt is a batch of one
    messages: tuple[ChatMessage, ...] = ()  # chat
    sampling: Sampling = field(default_factory=Sampling)
    chat: ChatOptions | None = None
    stream: bool = False
    stream_usage: bool = False
    adapter: str | None = None  # LoRA / PEFT / deployment selected by the client
    embedding_replacement: EmbeddingReplacement | None = None
    timeout: float | None = None  # seconds, from the client's own timeout field
    user: str | None = None
    extra_body: Mapping[str, JSON] | None = None
    # Headers the client asked to pass on (SGP's ``inference_extra_headers``, feature ``EXTRA_HEADERS``):
    # sent only by a wire that declares the feature, never a name ``dialects.common`` reserves.
    extra_headers: Mapping[str, str] | None = None
    # An Anthropic client's ``anthropic-beta`` values, comma-separated: its own vendor's protocol
    # header, sent by Anthropic's wire alone (the other wires never read it).
    anthropic_beta: str | None = None
    want_token_ids: bool = False  # the client's dialect returns output token ids
    want_seed: bool = False  # the client's dialect returns the seed used per choice
    # ``sampling.seeds`` was drawn by the gateway (the client gave none; its dialect reports the seed
    # used): it goes to targets that take a seed, and is taken off for the others (``dispatch``).
    seed_drawn: bool = False
    # The stream format in which the client's dialect takes an upstream's content chunks as they came
    # (e.g. "openai"), when the upstream speaks it too; None: every chunk is decoded and re-encoded.
    relay: str | None = None
    # The stream may be resumed mid-answer on another target (``routing/resume.py``): an upstream that
    # can return the output's token ids is asked for them, so a continuation is exact; a client whose
    # dialect shows none never sees them.
    resumable: bool = False
    # The client's body as it came, for a target of the client's own vendor that takes it whole (an
    # Anthropic client to an Anthropic target: fields the gateway does not model pass through).
    native: Mapping[str, JSON] | None = None
    native_dialect: str | None = None  # whose body ``native`` is: a target's path for it is chosen by it
    # What a target of ``native``'s vendor gets besides it (a stored Responses chain's items: sent as
    # input, or held by the upstream that made them); counted in the prompt's bound, read by no codec.
    chain: tuple[JSON, ...] = ()
    features: frozenset[Feature] = frozenset()
    fields: Mapping[Feature, str] = field(default_factory=dict)
    reasons: Mapping[Feature, str] = field(default_factory=dict)  # why a field only some targets take
    embedding: EmbeddingOptions | None = None  # an embeddings request
    # What the client's dialect needs again to render its answer and nothing else reads (the Responses
    # dialect's echoed fields, its response id): opaque here, never sent upstream.
    reply: Any = None

    def field_name(self, feature: Feature) -> str:
        return self.fields.get(feature, feature.value)

    def field_reason(self, feature: Feature) -> str:
        return self.reasons.get(feature, "")

    @property
    def choice_count(self) -> int:
        return max(1, len(self.prompts)) * self.sampling.n


def drawn_seed() -> tuple[int, ...]:
    """The seed a dialect that reports seeds sends when its client gave none (``seed_drawn``).
    Drawn while parsing, in the request as built: no copy of the request and its sampling per call."""
    return (getrandbits(31),)

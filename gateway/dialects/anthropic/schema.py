"""The bodies Anthropic's Messages API takes (``POST /v1/messages``, ``/v1/messages/count_tokens``), as
the Anthropic Python SDK (2.14.0, ``types/message_create_params.py``) writes them.

Every field the gateway can honour, or can refuse by name with a reason, is modelled; any other field
is refused as unknown (``Body``). Content blocks are a union tagged by ``type``: a block type the
gateway does not model (``document``, ``search_result``, server tools' results) is refused naming the
block's path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from gateway.dialects.common import Body, Items, Name, Objects, OpenPart, Part, Texts, TokenCount, TopK, Unit

JSON = Any

Temperature1 = Annotated[float, Field(ge=0, le=1)]  # Anthropic's range is 0-1, not OpenAI's 0-2


class CacheControl(Part):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(Part):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: Objects | None = None


class Base64Source(Part):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class UrlSource(Part):
    type: Literal["url"]
    url: str


class ImageBlock(Part):
    type: Literal["image"]
    source: Annotated[Base64Source | UrlSource, Field(discriminator="type")]
    cache_control: CacheControl | None = None


class ToolUseBlock(Part):
    type: Literal["tool_use"]
    id: Name
    name: Name
    input: dict[str, JSON]
    cache_control: CacheControl | None = None


ResultPart = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(Part):
    type: Literal["tool_result"]
    tool_use_id: Name
    content: str | Annotated[list[ResultPart], Items] | None = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None


class ThinkingBlock(Part):
    """A previous turn's thinking, sent back by the client: an Anthropic target gets it as it came, a
    chat wire that takes it (vLLM's) as the turn's reasoning (``Feature.THOUGHTS``)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(Part):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


def _as_blocks(value: JSON) -> JSON:
    """A string content is one text block (Anthropic's shorthand): a union would report a wrong
    block against the string member first."""
    return [{"type": "text", "text": value}] if isinstance(value, str) else value


class MessageParam(Part):
    # "system": an instruction mid-conversation (beta mid-conversation-system-2026-04-07, which Claude
    # Code sends for a model it does not know), text only
    role: Literal["user", "assistant", "system"]
    content: Annotated[list[Block], BeforeValidator(_as_blocks), Items]


class Tool(OpenPart):
    """A tool: a custom one (``input_schema``), or a server tool (``type`` like ``web_search_20250305``),
    which only Anthropic itself runs. Extra keys are carried (Anthropic adds tool fields often)."""

    name: Name
    type: Name | None = None
    description: str | None = None
    input_schema: dict[str, JSON] | None = None
    cache_control: CacheControl | None = None


class ToolChoice(Part):
    type: Literal["auto", "any", "tool", "none"]
    name: Name | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(Part):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: TokenCount | None = None


class Metadata(Part):
    user_id: Name | None = None


class CountTokensBody(Body):
    """``/v1/messages/count_tokens``: the prompt side of a Messages body."""

    model: Name
    messages: Annotated[list[MessageParam], Field(min_length=1), Items]
    system: str | Annotated[list[TextBlock], Items] | None = None
    tools: Annotated[list[Tool], Items] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    cache_control: CacheControl | None = None


class MessagesBody(CountTokensBody):
    max_tokens: TokenCount  # required, as Anthropic requires it
    stop_sequences: Texts | None = None
    temperature: Temperature1 | None = None
    top_p: Unit | None = None
    top_k: TopK | None = None
    metadata: Metadata | None = None
    stream: bool | None = None
    service_tier: Literal["auto", "standard_only"] | None = None


# Request fields only Anthropic's platform serves, and why: the body goes to Anthropic targets as it
# came; every other target refuses them by name with the reason (any other unknown field is refused
# as unknown, by every target).
PLATFORM_FIELDS: dict[str, str] = {
    "container": "code-execution containers run only on Anthropic's platform",
    "mcp_servers": "remote MCP servers are called only by Anthropic's platform",
    "output_config": "not served by the gateway",
    "context_management": "not served by the gateway",
    "inference_geo": "not served by the gateway",
    "speed": "not served by the gateway",
    "diagnostics": "not served by the gateway",
}

"""vLLM's ``POST /tokenize`` (vLLM 0.32, ``entrypoints/serve/tokenize``), sans-IO: a chat's messages and
tools through the model's chat template, with the generation prompt (or the final message left open,
as the chat body asks), answered with the ids and their ``count``. What a chat's prompt is, token for
token, as the engine will see it: the resumer continues from these ids, and count_tokens answers the
count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.request import InternalRequest, Operation
from gateway.dialects.base import Wire, count_in

JSON = Any
# what of a chat body the chat template reads (vLLM's ``TokenizeChatRequest`` takes each of them)
TEMPLATE_FIELDS = ("tools", "chat_template_kwargs", "continue_final_message", "add_generation_prompt")


def tokenize_body(request: InternalRequest, wire: Wire, model: str) -> dict[str, JSON]:
    """A completion's prompt (special tokens added, as to a text prompt), or a chat's messages as the
    wire sends them, with what its template reads."""
    body: dict[str, JSON] = {"model": model}
    if request.operation is not Operation.CHAT:
        return body | {"prompt": request.prompts[0]}
    chat = wire.encode(request, model)
    body |= {"messages": chat["messages"], "add_generation_prompt": True}
    return body | {name: chat[name] for name in TEMPLATE_FIELDS if name in chat}


@dataclass(frozen=True, slots=True)
class VllmTokenize:
    def url(self, base_url: str, wire: Wire) -> str:
        return base_url.removesuffix("/v1") + "/tokenize"

    def body(self, request: InternalRequest, wire: Wire, model: str) -> dict[str, JSON]:
        return tokenize_body(request, wire, model)

    def read(self, data: JSON) -> int | None:
        return count_in(data, "count")


VLLM_TOKENIZE = VllmTokenize()

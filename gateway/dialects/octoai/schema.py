"""OctoAI request bodies (seed 003; octoai 1.11 and octoai-sdk 0.10.1): OpenAI's with ``peft``,
``loglikelihood`` and ``log_prompt``, a ``logit_bias`` that may hold nulls, and the chat extras octoai-sdk
sends.
"""

from __future__ import annotations

from typing import Any

from gateway.dialects.common import Bias, Name, Objects, Scale, Unit
from gateway.dialects.openai.schema import ChatBody, CompletionBody, ResponseFormat

JSON = Any


class OctoExtras(CompletionBody):
    peft: Name | None = None
    loglikelihood: bool | None = None
    log_prompt: bool | None = None
    logit_bias: dict[str, Bias | None] | None = None  # type: ignore[assignment]


class OctoChatBody(ChatBody):
    # octoai-sdk 0.10 always sends these two (as null): OpenAI's deprecated function calling
    functions: Objects | None = None
    function_call: Name | dict[str, JSON] | None = None
    peft: Name | None = None
    loglikelihood: bool | None = None
    log_prompt: bool | None = None
    ignore_eos: bool | None = None
    min_p: Unit | None = None
    repetition_penalty: Scale | None = None
    response_format: ResponseFormat | None = None

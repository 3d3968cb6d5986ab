"""Wire codecs, one per vendor, sans-IO: each parses its clients' bodies into the internal request,
renders internal answers in its own shape, and (for upstream vendors) serves the egress side too.

``DIALECTS`` is the registry the route table draws from; the names are bounded metric labels.
"""

from __future__ import annotations

from gateway.dialects.anthropic import ANTHROPIC
from gateway.dialects.base import Dialect
from gateway.dialects.friendli import FRIENDLI, FRIENDLI_2024
from gateway.dialects.octoai import OCTOAI
from gateway.dialects.openai import OpenAIDialect
from gateway.dialects.openai.embeddings import EMBEDDINGS
from gateway.dialects.responses import RESPONSES
from gateway.dialects.sgp import SGP_V4, SGP_V5

OPENAI = OpenAIDialect(friendli=FRIENDLI, octoai=OCTOAI)

DIALECTS: dict[str, Dialect] = {
    d.name: d for d in (OPENAI, FRIENDLI, FRIENDLI_2024, SGP_V4, SGP_V5, OCTOAI, ANTHROPIC, RESPONSES, EMBEDDINGS)
}

__all__ = [
    "ANTHROPIC",
    "DIALECTS",
    "EMBEDDINGS",
    "FRIENDLI",
    "FRIENDLI_2024",
    "OCTOAI",
    "OPENAI",
    "RESPONSES",
    "SGP_V4",
    "SGP_V5",
    "Dialect",
]

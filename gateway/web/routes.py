"""The route table: every path a vendor SDK uses, mapped to the dialect that answers it.

Paths come from clients.md §1 (what each SDK appends to its base URL). ``/v1/...`` is shared by the
OpenAI SDK, friendli-client, the Friendli container SDK and both OctoAI SDKs; the OpenAI dialect's
``select`` tells them apart per request.

``OWNERS`` says whose envelope answers a request no route takes (a wrong path or method, a request
the HTTP parser refused): the dialect that owns the path's prefix, or on a path several SDKs share,
the one its headers name.
"""

from __future__ import annotations

from gateway.core.request import Operation
from gateway.dialects import ANTHROPIC, EMBEDDINGS, FRIENDLI, OPENAI, RESPONSES, SGP_V4, SGP_V5
from gateway.web.pipeline import RouteSpec
from gateway.web.unrouted import Owners

C, CHAT = Operation.COMPLETION, Operation.CHAT

ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("POST", "/v1/completions", OPENAI, C, "container"),
    RouteSpec("POST", "/v1/chat/completions", OPENAI, CHAT, "container"),
    RouteSpec("POST", "/serverless/v1/completions", FRIENDLI, C, "serverless"),
    RouteSpec("POST", "/serverless/v1/chat/completions", FRIENDLI, CHAT, "serverless"),
    RouteSpec("POST", "/dedicated/v1/completions", FRIENDLI, C, "dedicated"),
    RouteSpec("POST", "/dedicated/v1/chat/completions", FRIENDLI, CHAT, "dedicated"),
    RouteSpec("POST", "/v4/beta/completions", SGP_V4, C),
    RouteSpec("POST", "/v4/beta/chat/completions", SGP_V4, CHAT),
    RouteSpec("POST", "/v5/completions", SGP_V5, C),
    RouteSpec("POST", "/v5/chat/completions", SGP_V5, CHAT),
    RouteSpec("POST", "/v1/messages", ANTHROPIC, CHAT),
    RouteSpec("POST", "/v1/responses", RESPONSES, CHAT, kept=True),
    RouteSpec("POST", "/v1/embeddings", EMBEDDINGS, Operation.EMBEDDING),
)
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"  # Anthropic's: the target's count, else the bound

MODEL_LIST_PATHS = ("/v1/models", "/serverless/v1/models", "/dedicated/v1/models", "/v5/models")

OWNERS = Owners(
    # whole segments: ``/v1/messages/batches`` is Anthropic's, ``/v1/messagesx`` is not
    prefixes=(
        ("/v1/messages", ANTHROPIC),
        ("/v1/complete", ANTHROPIC),  # Anthropic's legacy Text Completions (older SDKs' ``completions``)
        ("/v1/responses", RESPONSES),
        ("/v1/embeddings", EMBEDDINGS),
        ("/serverless", FRIENDLI),  # ``/serverless/tools/v1/...`` too (Friendli's tool-assisted chat)
        ("/dedicated", FRIENDLI),
        ("/v4", SGP_V4),
        ("/v5", SGP_V5),
    ),
    # a shared path (``/v1/files``, ``/v1/models`` with a POST, a base URL set wrong): the SDK's own
    # header (``web.models`` tells Anthropic's list from OpenAI's by it too); then the default's
    # ``select`` (Friendli's and OctoAI's SDK headers)
    headers=(("anthropic-version", ANTHROPIC),),
    default=OPENAI,
)

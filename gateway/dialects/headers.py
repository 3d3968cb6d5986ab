"""Which of a client's headers may reach an upstream, on every wire.

The gateway forwards no ingress header as it came. What a wire sends is its own: the target's key,
its team, its vendor's version, and the gateway's request id and trace context (``adapters/http.py``).
Two things of the client's are mapped on, each deliberately: an Anthropic client's ``anthropic-beta``,
to Anthropic's wire alone (``InternalRequest.anthropic_beta``), and the headers a client asks to pass
on by name (SGP's ``inference_extra_headers``, feature ``EXTRA_HEADERS``), by the wires that declare
that feature, minus every name reserved here. A parse refuses a reserved name (``refused_header``);
``passed_headers`` is what every wire sends of them, whatever a parse let in.

What does not belong here: a vendor's own headers, which its wire writes.
"""

from __future__ import annotations

from gateway.core.request import Feature, InternalRequest

# What only the gateway says on an upstream call: the credentials of every vendor it speaks to, the
# account, team or project it bills, its request id and trace context, and the message's framing.
GATEWAYS_OWN = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}
    | {"openai-organization", "openai-project", "x-selected-account-id"}
    | {"x-request-id", "traceparent", "tracestate", "baggage"}
    | {"host", "content-length", "content-type", "content-encoding", "transfer-encoding", "connection"}
    | {"keep-alive", "te", "trailer", "upgrade", "expect", "accept", "accept-encoding", "user-agent"}
)
# Vendors' protocol headers (a version or beta that says how the body is read, a team) and their SDKs'
# own (Stainless-built SDKs: OpenAI's, Anthropic's; Fern-built: OctoAI's): another vendor's would change
# what an upstream answers, or tell it about the client.
VENDOR_PREFIXES = ("anthropic-", "openai-", "x-stainless-", "x-friendli-", "x-fern-", "proxy-")
# RFC 9110 §5.6.2: a field name is a token of these characters
TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def refused_header(name: str, value: str) -> str | None:
    """Why a client may not pass on ``name: value`` to an upstream; None when it may."""
    lower = name.lower()
    if not name or not TOKEN.issuperset(name):
        return "not a header name"
    if lower in GATEWAYS_OWN:
        return "the gateway sets it"
    if lower.startswith(VENDOR_PREFIXES):
        return "a vendor's protocol header"
    if not value.isprintable():  # a line break would split the header (aiohttp refuses it: a 500)
        return "its value holds a control character"
    return None


def passed_headers(request: InternalRequest) -> dict[str, str]:
    """The client's pass-through headers a wire sends: only for a request that asks for them (fitted
    to a target whose wire declares ``EXTRA_HEADERS``), and only those ``refused_header`` lets by."""
    if not request.extra_headers or Feature.EXTRA_HEADERS not in request.features:
        return {}
    return {k: v for k, v in request.extra_headers.items() if refused_header(k, v) is None}

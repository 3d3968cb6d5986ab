"""The gateway's one error hierarchy.

Every failure the data path can raise is a ``GatewayError``. Each carries a ``status`` (the HTTP status
a neutral client would get), a stable ``code`` (what each dialect's error table is keyed on), a
``retryable`` flag (used by routing: retry or fall back only when the upstream *failed*, never when it
*rejected* the request) and, for request errors, the client's ``param`` name.

    GatewayError
    ├── RequestError                   the client's mistake; never 5xx
    │   ├── InvalidRequest      400    malformed body, bad value, cross-field rule (names the field)
    │   ├── UnsupportedFeature  400    the chosen target cannot honour a requested field
    │   ├── AuthenticationFailed 401
    │   ├── PermissionDenied    403    key valid, but not for this team or model
    │   ├── NotFound            404    unknown path or stored object
    │   │   └── ModelNotFound   404    no such model, or not one the caller's team may see
    │   ├── MethodNotAllowed    405    a served path, another method
    │   ├── PayloadTooLarge     413
    │   ├── HeaderFieldsTooLarge 431   a header line past the HTTP parser's limit, or too many
    │   └── RequestTimeout      408    the body did not arrive whole in time
    ├── RateLimited             429    a limit refused admission (carries retry_after)
    ├── Overloaded              503    this process cannot hold the answer now (its answer buffer is full)
    ├── DeadlineExceeded        504    the request's deadline expired, waiting for a slot too (Friendli: 429)
    └── UpstreamError                  the upstream's answer, split in two:
        ├── UpstreamRejected    4xx    it refused the request: the client's status is kept
        ├── UpstreamFailed      502    5xx, reset, malformed answer: retryable before the first byte
        │   └── UpstreamCredentials 502  the gateway's own key for the target is refused or unusable
        ├── UpstreamTimeout     504    connect / first-byte / idle / total timeout
        └── NoHealthyTarget     503    every target of the model is cooling down

Nothing here imports the web framework: dialects render these into their own envelopes.

``message`` is for the client: it names the model or target and the failure's class, never an
internal address or a command to run. What an operator needs to fix it (the target's URL, the command
that starts it) goes in ``hint``: the request's log line and ``/status`` show it, no answer does.
"""

from __future__ import annotations


def utf8(text: str) -> str:
    """``text`` as UTF-8 can carry it. A header's bytes that are not UTF-8 reach the gateway as lone
    surrogates (aiohttp decodes header values with ``surrogateescape``), which no JSON encoder writes:
    an error quoting one could be neither answered nor logged. They are written as escapes."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


class GatewayError(Exception):
    status: int = 500
    code: str = "internal_error"
    retryable: bool = False

    def __init__(self, message: str, *, param: str | None = None) -> None:
        message = utf8(message)
        super().__init__(message)
        self.message = message
        self.param = utf8(param) if param is not None else None
        self.hint = ""  # for operators only: the log line and /status, never the client's answer
        self.headers: dict[str, str] = {}  # extra response headers (rate-limit state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, param={self.param!r})"


class RequestError(GatewayError):
    status = 400
    code = "invalid_request"


class InvalidRequest(RequestError):
    pass


class UnsupportedFeature(RequestError):
    code = "unsupported_parameter"

    def __init__(self, field: str, target: str, reason: str = "") -> None:
        why = f": {reason}" if reason else ""
        super().__init__(f"'{field}' is not supported by target '{target}'{why}", param=field)
        self.field = field
        self.target = target


class AuthenticationFailed(RequestError):
    status = 401
    code = "invalid_api_key"


class PermissionDenied(RequestError):
    status = 403
    code = "permission_denied"


class NotFound(RequestError):
    status = 404
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"  # OpenAI's code for it; the model list and every request name the model


class MethodNotAllowed(RequestError):
    status = 405
    code = "method_not_allowed"


class PayloadTooLarge(RequestError):
    status = 413
    code = "payload_too_large"


class HeaderFieldsTooLarge(RequestError):
    status = 431
    code = "header_fields_too_large"


class ShuttingDown(GatewayError):
    """The gateway stopped while the request was in flight, past its drain period: retry elsewhere."""

    status = 503
    code = "shutting_down"


class UnsupportedMediaType(RequestError):
    status = 415
    code = "unsupported_media_type"


class RateLimited(GatewayError):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Overloaded(GatewayError):
    """This process's condition, not the target's: the answer could not be held while others fill the
    answer buffer. Not tried on another target (whose answer draws on the same buffer) and no target
    cools down for it; the client is told to retry shortly."""

    status = 503
    code = "overloaded"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.headers["Retry-After"] = f"{retry_after:g}"


class DeadlineExceeded(GatewayError):
    status = 504
    code = "deadline_exceeded"


class UpstreamError(GatewayError):
    status = 502
    code = "upstream_error"


class UpstreamRejected(UpstreamError):
    """The upstream answered 4xx: the request itself was refused, so the status is the client's."""

    code = "upstream_rejected"

    def __init__(self, message: str, *, status: int, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status
        if status == 429:
            self.retryable = True


class UpstreamFailed(UpstreamError):
    code = "upstream_failed"
    retryable = True


class UpstreamMalformed(UpstreamFailed):
    """The target answered, but not in its wire format's shape (valid JSON of the wrong kind, numbers out
    of range): a failure of the target, tried elsewhere before the first byte."""

    code = "upstream_malformed"


class UpstreamCredentials(UpstreamFailed):
    """The target refused the gateway's own key, or the key's source holds nothing usable: a deployment
    fault, never the client's; its message names the target and the reason, never the key."""

    code = "upstream_credentials"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"
    retryable = True


class FirstTokenTimeout(UpstreamTimeout):
    """The target answered, but no token came within its first-token deadline (``ttft``): tried
    elsewhere before anything reached the client, and counted apart from connect and idle bounds."""

    code = "first_token_timeout"


class NoHealthyTarget(UpstreamError):
    status = 503
    code = "no_healthy_target"


class RequestTimeout(RequestError):
    """The client stopped sending its body (short of its Content-Length, or chunked with no last chunk)."""

    status = 408
    code = "request_timeout"


class StoreUnavailable(GatewayError):
    """The store a request's state lives in (stored Responses, in Redis) could not be reached."""

    status = 503
    code = "store_unavailable"
    retryable = True

"""Upstream failures translated into the gateway's error hierarchy, at the IO boundary: a vendor's
error envelope read tolerantly, an unreachable target named for the client with the operator's hint
beside it, an answer too large or over the process's buffer, an answer of the wrong shape, a route the
server does not have. Plain functions of what the HTTP shell (``adapters/http.py``) saw; no IO here.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import aiohttp
import pydantic_core

from gateway.core.errors import GatewayError, Overloaded, UpstreamFailed, UpstreamMalformed
from gateway.core.request import InternalRequest, Operation
from gateway.runtime.config import Target
from gateway.runtime.memory_budget import MemoryBudget

# What one upstream may make the gateway hold: a whole answer (or error body). Far above any real
# answer; a broken or hostile upstream fails instead of growing the gateway's memory.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def upstream_message(body: bytes | bytearray) -> tuple[str, str | None]:
    """A tolerant reader of every vendor's error envelope (dialects.md §6.16): the message and the
    field it names, if any."""
    message, param = _message_and_param(body)
    if param is None and (named := VLLM_PARAMETER.search(message)):
        param = named.group(1)  # an envelope without a field of its own round vLLM's message
    return message, param


# vLLM's validation errors end their message with the field: "... (parameter=prompt, value=...)"
VLLM_PARAMETER = re.compile(r"\(parameter=([A-Za-z_][\w.\[\]-]*)[,)]")


def blamed(param: str | None, req: InternalRequest) -> str | None:
    """The client's field an upstream's refusal names. vLLM names the prompt's length ``input_tokens``
    when prompt and max_tokens pass the model's context, a field no client sends: the client's is
    ``max_tokens`` when a length was asked for, else its prompt."""
    if param != "input_tokens":
        return param
    if req.sampling.max_tokens is not None:
        return "max_tokens"
    return "messages" if req.operation is Operation.CHAT else "prompt"


def _message_and_param(body: bytes | bytearray) -> tuple[str, str | None]:
    try:
        data = pydantic_core.from_json(body)
    except ValueError:
        return body[:300].decode("utf-8", "replace") or "no body", None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            param = err.get("param")
            return str(err.get("message") or err), param if isinstance(param, str) else None
        if isinstance(data.get("message"), str):
            return data["message"], None
        detail = data.get("detail")
        if detail is not None:
            return str(detail), None
    return str(data)[:300], None


EMBEDDED_LOCAL = "local-vllm"  # the embedded default's catch-all target (gateway/runtime/defaults.py)


def unreachable(name: str, target: Target, exc: BaseException) -> UpstreamFailed:
    """A target that could not be reached: the client is told which and why; the operator's ``hint``
    (the log line, ``/status``) has its address and what usually fixes it."""
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, ConnectionRefusedError):
        why = "connection refused"
    elif isinstance(os_error, OSError) and os_error.strerror:
        why = os_error.strerror
    else:
        why = type(exc).__name__
    pool, _, replica = name.partition("@")  # a pool member's name carries its address: not for the client
    err = UpstreamFailed(f"target '{pool}'{': a replica' if replica else ''} is unreachable ({why})")
    where = target.base_url or "(no address)"
    url = urlsplit(target.base_url)
    if not isinstance(exc, aiohttp.ClientConnectorError):  # it answered once, or took too long: no guess
        err.hint = f"at {where}"
    elif target.provider == "vllm" or url.hostname in ("127.0.0.1", "localhost", "::1"):
        port = url.port or (443 if url.scheme == "https" else 80)
        elsewhere = (
            "set a vendor API key such as OPENAI_API_KEY, or serve a config file (--config FILE)"
            if name == EMBEDDED_LOCAL
            else "correct the target's base_url in the config"
        )
        start = f"start a model server there (`vllm serve MODEL --port {port}`)"
        err.hint = f"nothing listens at {where}: {start}, or {elsewhere}"
    else:
        err.hint = f"at {where}: check the target's base_url and that this host can reach it (DNS, proxy, firewall)"
    return err


def too_large(name: str, bound: int = MAX_ANSWER_BYTES) -> UpstreamFailed:
    return UpstreamFailed(f"target '{name}' answered with more than {bound} bytes")


def over_budget(name: str, size: str, budget: MemoryBudget, own: int) -> GatewayError:
    """An answer the process-wide answer buffer cannot take now (``own``: what this read holds of it).
    With other answers holding part of it, this process's condition (``Overloaded``, 503, retry
    shortly). With nothing else held, the answer alone is past the whole buffer: no retry here will fit
    it (502, not retried)."""
    where = f"server.max_buffered_bytes: {budget.held} of {budget.limit} bytes in use"
    if budget.held > own:
        return Overloaded(f"the gateway is holding too many answers to read this one now ({where}); retry shortly")
    err = UpstreamFailed(f"target '{name}' answered with {size}, more than the gateway may hold at once ({where})")
    # Not retried: another target's answer would draw on the same buffer; nor counted against this
    # target, which would cool a healthy one.
    err.retryable = False
    return err


# What a sans-IO decoder raises on JSON of the wrong shape (a list where an object goes, "abc" for an
# index, 1e400 for a count): translated here, at the IO boundary, into the target's failure.
# A decoder's own UpstreamMalformed is caught too, so that every such message names the target.
SHAPE_ERRORS = (
    UpstreamMalformed,
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,
)


def route_missing(raw: bytes | bytearray) -> bool:
    """A 404 for the path itself (a server without the route: FastAPI's ``{"detail": "Not Found"}``),
    not one the route's own handler gave (an Anthropic or OpenAI error envelope, or vLLM's
    ``"object": "error"``: an unknown model, an unknown previous response)."""
    try:
        data = pydantic_core.from_json(raw)
    except ValueError:
        return True
    if not isinstance(data, dict):
        return True
    return not (data.get("type") == "error" or data.get("object") == "error" or isinstance(data.get("error"), dict))


def malformed(name: str, exc: BaseException) -> UpstreamMalformed:
    why = str(exc)[:120] if isinstance(exc, UpstreamMalformed) else f"{type(exc).__name__}: {str(exc)[:80]}"
    return UpstreamMalformed(f"target '{name}' answered in an unexpected shape ({why})")

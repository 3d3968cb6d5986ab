"""Pieces every wire codec shares: strict body models, validation errors that name the field, SSE
framing, and the two logprob shapes (legacy four arrays, chat-style ``content[]``).

Pure functions and data only: no IO, no web framework. Vendor-specific rules live in each vendor's
package, not here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict

from gateway.core.errors import InvalidRequest
from gateway.core.request import Feature
from gateway.core.response import TokenLogprob, Usage

JSON = Any
M = TypeVar("M", bound=BaseModel)

DONE = b"data: [DONE]\n\n"


class Body(BaseModel):
    """A request body: unknown fields are refused by name; explicit ``null`` means "not given"
    (friendli-client sends every optional field as null, clients.md §4)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Part(BaseModel):
    """A nested object in a request body; same rules as ``Body``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class OpenPart(BaseModel):
    """A nested object whose extra keys are carried through (tool definitions, content parts)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def invalid_from(exc: pydantic.ValidationError) -> InvalidRequest:
    """The first validation error, as one sentence naming the field."""
    err = exc.errors(include_url=False)[0]
    # Union members add their type name to the location; the client's field name is what matters.
    loc = [p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p[:1].isupper()))]
    field = _loc(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        return InvalidRequest(f"unknown field '{field}'", param=field)
    if kind == "missing":
        return InvalidRequest(f"'{field}' is required", param=field)
    return InvalidRequest(f"'{field}': {err['msg']}", param=field or None)


def without(body: M, name: str) -> M:
    """``body`` with the field ``name`` unset, copied only when it is set (a copy costs microseconds)."""
    return body if getattr(body, name) is None else body.model_copy(update={name: None})


def validate(model: type[M], data: JSON) -> M:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise invalid_from(exc) from None


def loads(body: bytes) -> dict[str, JSON]:
    """Parse a request body once; anything but a JSON object is the client's error."""
    try:
        data = pydantic_core.from_json(body)
    except ValueError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest("request body must be a JSON object")
    return data


dumps: Callable[[JSON], bytes] = pydantic_core.to_json


def sse(obj: JSON) -> bytes:
    return b"data: " + pydantic_core.to_json(obj) + b"\n\n"


class FeatureSet:
    """Collects the features a request uses and the client's name for each, while parsing."""

    __slots__ = ("features", "fields")

    def __init__(self) -> None:
        self.features: set[Feature] = set()
        self.fields: dict[Feature, str] = {}

    def use(self, feature: Feature, field: str, when: object = True) -> None:
        if not when:
            return
        self.features.add(feature)
        self.fields.setdefault(feature, field)

    def frozen(self) -> frozenset[Feature]:
        return frozenset(self.features)


def stop_list(value: str | Sequence[str] | None, field: str = "stop", cap: int | None = 4) -> tuple[str, ...]:
    if value is None:
        return ()
    items = (value,) if isinstance(value, str) else tuple(value)
    if cap is not None and len(items) > cap:
        raise InvalidRequest(f"'{field}' accepts at most {cap} sequences", param=field)
    if any(s == "" for s in items):
        raise InvalidRequest(f"'{field}' must not contain empty strings", param=field)
    return items


def logit_bias(value: dict[str, float] | None, field: str = "logit_bias") -> dict[int, float] | None:
    if value is None:
        return None
    out: dict[int, float] = {}
    for key, bias in value.items():
        try:
            token = int(key)
        except ValueError:
            raise InvalidRequest(f"'{field}' keys must be token ids, got {key!r}", param=field) from None
        if not -100 <= bias <= 100:
            raise InvalidRequest(f"'{field}' values must be within [-100, 100]", param=field)
        out[token] = bias
    return out or None


def exclusive(body: BaseModel, *names: str) -> None:
    given = [n for n in names if getattr(body, n) is not None]
    if len(given) > 1:
        raise InvalidRequest(
            f"only one of {', '.join(repr(n) for n in names)} may be given, got {' and '.join(given)}",
            param=given[1],
        )


# --- usage ---------------------------------------------------------------------------------------


def usage_json(usage: Usage, details: bool = False) -> dict[str, JSON]:
    out: dict[str, JSON] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if details:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens or 0}
    return out


def usage_from(data: JSON) -> Usage | None:
    if not isinstance(data, dict):
        return None
    prompt = int(data.get("prompt_tokens") or 0)
    completion = int(data.get("completion_tokens") or 0)
    details = data.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cdetails = data.get("completion_tokens_details")
    reasoning = cdetails.get("reasoning_tokens") if isinstance(cdetails, dict) else None
    return Usage(prompt, completion, cached, reasoning)


# --- logprobs ------------------------------------------------------------------------------------


def legacy_logprobs(tokens: Iterable[TokenLogprob], offset: int = 0) -> tuple[dict[str, JSON], int]:
    """OpenAI legacy shape; ``text_offset`` is computed from cumulative token text lengths
    (dialects.md §6.5). Returns the object and the offset after the last token."""
    out: dict[str, list[JSON]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for t in tokens:
        out["tokens"].append(t.token)
        out["token_logprobs"].append(t.logprob)
        out["top_logprobs"].append(dict(t.top) if t.top else {t.token: t.logprob})
        out["text_offset"].append(offset)
        offset += len(t.token)
    return out, offset


def chat_logprobs(tokens: Iterable[TokenLogprob]) -> dict[str, JSON]:
    def entry(token: str, logprob: float, raw: tuple[int, ...] | None) -> dict[str, JSON]:
        return {
            "token": token,
            "logprob": logprob,
            "bytes": list(raw) if raw is not None else list(token.encode()),
        }

    content = []
    for t in tokens:
        item = entry(t.token, t.logprob, t.bytes)
        item["top_logprobs"] = [entry(tok, lp, None) for tok, lp in t.top]
        content.append(item)
    return {"content": content, "refusal": None}


def logprobs_from(data: JSON) -> list[TokenLogprob] | None:
    """Reads either shape (OctoAI's SDKs disagree on which one they send, dialects.md §4.3)."""
    if not isinstance(data, dict):
        return None
    content = data.get("content")
    if isinstance(content, list):
        return [
            TokenLogprob(
                token=str(c.get("token", "")),
                logprob=float(c.get("logprob") or 0.0),
                top=tuple(
                    (str(t.get("token", "")), float(t.get("logprob") or 0.0)) for t in c.get("top_logprobs") or ()
                ),
                bytes=tuple(c["bytes"]) if c.get("bytes") is not None else None,
            )
            for c in content
        ]
    tokens = data.get("tokens")
    if not isinstance(tokens, list):
        return None
    lps = data.get("token_logprobs") or [0.0] * len(tokens)
    tops = data.get("top_logprobs") or [None] * len(tokens)
    return [
        TokenLogprob(
            token=str(tok),
            logprob=float(lp if lp is not None else 0.0),
            top=tuple((str(k), float(v)) for k, v in (top or {}).items()),
        )
        for tok, lp, top in zip(tokens, lps, tops, strict=False)
    ]

"""Pieces every wire codec shares: strict body models, validation (its refusals worded by
``refusals.py``), the body caps of ``core/caps.py`` (checked before a body is parsed and before a
schema sees it), SSE framing, and the two logprob shapes (legacy four arrays, chat-style
``content[]``).

Pure functions and data only: no IO, no web framework. Vendor-specific rules live in each vendor's
package, not here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from random import getrandbits
from typing import Annotated, Any, TypeVar

import pydantic
import pydantic_core
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from gateway.core import caps
from gateway.core.errors import InvalidRequest, PayloadTooLarge, UpstreamMalformed
from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import TokenLogprob, Usage
from gateway.dialects.headers import passed_headers
from gateway.dialects.refusals import Origin, invalid_from

JSON = Any
M = TypeVar("M", bound=BaseModel)

DONE = b"data: [DONE]\n\n"


class Body(BaseModel):
    """A request body: unknown fields are refused by name; explicit ``null`` means "not given"
    (friendli-client sends every optional field as null, clients.md §4)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Part(BaseModel):
    """A nested object in a request body; same rules as ``Body``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class OpenPart(BaseModel):
    """A nested object whose extra keys are carried through (tool definitions, content parts)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, allow_inf_nan=False)


def at_most(cap: int) -> Any:
    """A list's or map's cap, checked before its items are: a schema's own ``max_length`` is checked
    after, and a union tries every member on every item first, one error object per item."""

    def capped(value: Any) -> Any:
        if isinstance(value, list | dict) and len(value) > cap:
            raise ValueError(f"holds more than {cap} items")
        return value

    return BeforeValidator(capped)


Items = at_most(caps.MAX_ITEMS)
# Field types with the ranges of ``core/caps.py``: every dialect's schema builds on these.
Name = Annotated[str, Field(max_length=caps.MAX_NAME)]
TokenCount = Annotated[int, Field(ge=1, le=caps.MAX_TOKENS)]
MinTokens = Annotated[int, Field(ge=0, le=caps.MAX_TOKENS)]
Choices = Annotated[int, Field(ge=1, le=caps.MAX_CHOICES)]
Seed = Annotated[int, Field(ge=caps.SEED_MIN, le=caps.SEED_MAX)]
TokenId = Annotated[int, Field(ge=0, le=caps.MAX_TOKEN_ID)]
TokenIds = Annotated[list[TokenId], at_most(caps.MAX_TOKEN_IDS)]
TopK = Annotated[int, Field(ge=-1, le=caps.MAX_TOKEN_ID)]
Ngram = Annotated[int, Field(ge=1, le=caps.MAX_TOKENS)]
Unit = Annotated[float, Field(ge=0, le=1)]
Temperature = Annotated[float, Field(ge=0, le=2)]
Penalty = Annotated[float, Field(ge=-2, le=2)]
Scale = Annotated[float, Field(gt=0, le=caps.MAX_SCALE)]  # a multiplicative penalty, 1 = off
Bias = Annotated[float, Field(ge=-100, le=100)]
Logprobs = Annotated[int, Field(ge=0, le=20)]
Texts = Annotated[list[str], Items]
# a choice constraint: vLLM refuses an empty one, so it is refused here, naming the field
ChoiceTexts = Annotated[list[str], Items, Field(min_length=1)]
Objects = Annotated[list[dict[str, JSON]], Items]


def without(body: M, name: str) -> M:
    """``body`` with the field ``name`` unset, copied only when it is set (a copy costs microseconds)."""
    return body if getattr(body, name) is None else body.model_copy(update={name: None})


def validate(model: type[M], data: dict[str, JSON], origin: Origin | None = None) -> M:
    """``data`` as ``model``, once it holds to the caps (``check``)."""
    check(data)
    return validated(model, data, origin)


def validated(model: type[M], data: dict[str, JSON], origin: Origin | None = None) -> M:
    """``data``, already ``check``-ed, as ``model``; an error names the field where ``origin`` says
    the client has it (``data`` is a copy with parts taken out)."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise invalid_from(exc, data, origin) from None


_MARKS = (b",", b"[", b"{")
_FEW_QUOTES = 64
_BACKSLASH = ord("\\")


def _outside_strings(body: bytes) -> list[tuple[int, int]]:
    """The spans of ``body`` between its strings, from its few quotes (an escaped one is inside a
    string); an unterminated last string runs to the end, as the parser reads it."""
    delimiters = [-1]
    at = body.find(b'"')
    while at >= 0:
        escapes = 0
        while at - escapes > 0 and body[at - escapes - 1] == _BACKSLASH:
            escapes += 1
        if escapes % 2 == 0:
            delimiters.append(at)
        at = body.find(b'"', at + 1)
    if len(delimiters) % 2:
        delimiters.append(len(body))
    return list(zip(delimiters[::2], delimiters[1::2], strict=True))


def too_many_values(body: bytes, cap: int) -> bool:
    """``body`` may hold more than ``cap`` JSON values, judged from its bytes without parsing: every
    value is the root, the first in its array or object, or follows a comma. In a body of few strings
    only the characters between them are counted (a long prompt is one value); a body of many is
    counted whole, which can only judge it stricter. Each count is one pass over the body's bytes and
    ends the judgement as soon as it passes the cap."""
    quotes = body.count(b'"')
    if quotes // 2 > cap:
        return True
    spans = _outside_strings(body) if quotes <= _FEW_QUOTES else [(-1, len(body))]
    seen = 1
    for mark in _MARKS:
        seen += sum(body.count(mark, start + 1, end) for start, end in spans)
        if seen > cap:
            return True
    return False


def loads(body: bytes) -> dict[str, JSON]:
    """Parse a request body once; anything but a JSON object is the client's error. A large body of
    many small values is refused before parsing: building them would hold the event loop and take
    many times the body's size in memory."""
    if len(body) > caps.UNCOUNTED_BODY and too_many_values(body, caps.MAX_JSON_VALUES):
        raise PayloadTooLarge(f"request body holds more than {caps.MAX_JSON_VALUES} JSON values")
    try:
        data = pydantic_core.from_json(body)
    except ValueError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest("request body must be a JSON object")
    if len(data) > caps.MAX_ITEMS:
        raise InvalidRequest(f"request body has more than {caps.MAX_ITEMS} fields")
    return data


def _at(path: str | None, key: str) -> str:
    """``path`` None: the body itself (a key may be the empty string)."""
    return key if path is None else f"{path}.{key}"


def _too_many(path: str, cap: int) -> InvalidRequest:
    return InvalidRequest(f"'{path}' holds more than {cap} items", param=path)


def _not_finite(path: str) -> InvalidRequest:
    return InvalidRequest(f"'{path}' must be a finite number", param=path)


TEXT_OR_IDS = frozenset({"prompt", "input"})


class _Check:
    """One walk over a parsed body: every list and map within its cap, every float finite, token-id
    lists homogeneous, in range and within the request's total. It runs before the schema, whose
    errors on a long list of wrong items would cost one object per item."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids = 0

    def mapping(self, node: dict[str, JSON], path: str | None, key: str) -> None:
        cap = caps.LIST_CAPS.get(key, caps.MAX_ITEMS)
        if len(node) > cap:
            raise _too_many(path, cap) if path is not None else InvalidRequest(f"request body has over {cap} fields")
        for k, v in node.items():
            kind = type(v)
            if kind is float:
                if not math.isfinite(v):
                    raise _not_finite(_at(path, k))
            elif kind is dict:
                self.mapping(v, _at(path, k), k)
            elif kind is list:
                self.sequence(v, _at(path, k), k)

    def sequence(self, node: list[JSON], path: str, key: str) -> None:
        cap = caps.LIST_CAPS.get(key, caps.MAX_ITEMS)
        if len(node) > cap:
            raise _too_many(path, cap)
        if key in caps.TOKEN_ID_FIELDS and node:
            first = type(node[0])
            # a prompt or an input may be text, a batch of texts or of token lists (a Responses input: items);
            # every other list here holds ids
            if first is not int and not (key in TEXT_OR_IDS and first in (str, list, dict) and not path.endswith("]")):
                raise _bad_id(f"{path}[0]")
            if len(set(map(type, node))) > 1:  # C loops: a long token list is walked here twice
                i = next(i for i, v in enumerate(node) if type(v) is not first)
                raise InvalidRequest(f"'{path}[{i}]': items must all be of one type", param=f"{path}[{i}]")
            if first is int:
                self.token_ids(node, path)
                return
        for i, v in enumerate(node):
            kind = type(v)
            if kind is float:
                if not math.isfinite(v):
                    raise _not_finite(f"{path}[{i}]")
            elif kind is dict:
                self.mapping(v, f"{path}[{i}]", key)
            elif kind is list:
                self.sequence(v, f"{path}[{i}]", key)

    def token_ids(self, ids: list[int], path: str) -> None:
        self.ids += len(ids)
        if self.ids > caps.MAX_TOKEN_IDS:
            raise InvalidRequest(f"'{path}': a request holds at most {caps.MAX_TOKEN_IDS} token ids", param=path)
        if min(ids) < 0 or max(ids) > caps.MAX_TOKEN_ID:
            i = next(i for i, t in enumerate(ids) if not 0 <= t <= caps.MAX_TOKEN_ID)
            raise _bad_id(f"{path}[{i}]")


def _bad_id(at: str) -> InvalidRequest:
    """A token id out of range, or no id where ids are: named where it is, in the message and ``param``."""
    return InvalidRequest(f"'{at}': token ids are integers in [0, {caps.MAX_TOKEN_ID}]", param=at)


def plain_number(value: JSON, high: float) -> bool:
    """A plain body's ``temperature`` or ``top_p`` as a strict schema takes it without a question: absent,
    or a number (an int becomes its float) within 0..``high`` (finite, as ``check`` makes sure)."""
    kind = type(value)
    return value is None or ((kind is float or kind is int) and 0 <= value <= high)


def check(data: dict[str, JSON]) -> None:
    """Refuses, naming the field, a body past the caps of ``core/caps.py``."""
    _Check().mapping(data, None, "")


dumps: Callable[[JSON], bytes] = pydantic_core.to_json


def sse(obj: JSON) -> bytes:
    return b"data: " + pydantic_core.to_json(obj) + b"\n\n"


def new_id(prefix: str) -> str:
    """An object id in a vendor's style (``resp_…``, ``toolu_…``) where the upstream gave none."""
    return f"{prefix}_{getrandbits(192):048x}"


class FeatureSet:
    """Collects the features a request uses, the client's name for each (its field, what an SDK reads as
    ``param``), and, where the field alone does not say it, why only some targets take it."""

    __slots__ = ("features", "fields", "reasons")

    def __init__(self) -> None:
        self.features: set[Feature] = set()
        self.fields: dict[Feature, str] = {}
        self.reasons: dict[Feature, str] = {}

    def use(self, feature: Feature, field: str, when: object = True, why: str = "") -> None:
        if not when:
            return
        self.features.add(feature)
        if feature not in self.fields:
            self.fields[feature] = field
            if why:
                self.reasons[feature] = why

    def frozen(self) -> frozenset[Feature]:
        return frozenset(self.features)


def openai_headers(key: str | None, team: str | None, request: InternalRequest) -> dict[str, str]:
    """OpenAI's request headers, for its chat/completions and its Responses wire alike: the key as a
    bearer token, the team as ``OpenAI-Organization``, and what the client may pass on (``headers``)."""
    headers = passed_headers(request)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    if team:
        headers["OpenAI-Organization"] = team
    return headers


def request_of(fs: FeatureSet, operation: Operation, model: str, **fields: Any) -> InternalRequest:
    """How every dialect's parse ends: the request, with the features it uses and the client's name for
    each (what a refusal or a dropped feature names)."""
    features = fs.frozen()
    return InternalRequest(
        operation=operation, model=model, features=features, fields=fs.fields, reasons=fs.reasons, **fields
    )


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
            token = -1
        if not 0 <= token <= caps.MAX_TOKEN_ID:
            raise InvalidRequest(f"'{field}' keys must be token ids, got {key[:32]!r}", param=field)
        if not -100 <= bias <= 100:
            raise InvalidRequest(f"'{field}' values must be within [-100, 100]", param=field)
        out[token] = bias
    return out or None


def choice_cap(prompts: int, n: int, best_of: int | None, field: str = "n") -> None:
    """Every prompt of a batch gets its own choices: their product is bounded as each is."""
    if prompts * max(n, best_of or 1) > caps.MAX_CHOICES:
        raise InvalidRequest(
            f"{prompts} prompts x {max(n, best_of or 1)} choices is more than {caps.MAX_CHOICES}", param=field
        )


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


# The most tokens one answer may report for any one count: what no model serves, far below what would
# overflow the limits' arithmetic in Redis. A figure past it is a broken upstream, not usage.
MAX_REPORTED_TOKENS = 2**31 - 1


def token_count(value: JSON, name: str) -> int:
    """A usage figure as the upstream reported it: a whole number of tokens (``12`` or ``12.0``) within
    ``MAX_REPORTED_TOKENS``; anything else makes the answer malformed, naming the field."""
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, float) and value.is_integer():
        count = int(value)
    else:
        raise UpstreamMalformed(f"upstream usage.{name} is not a token count: {str(value)[:40]}")
    if not 0 <= count <= MAX_REPORTED_TOKENS:
        raise UpstreamMalformed(f"upstream usage.{name} is out of range: {str(value)[:40]}")
    return count


def usage_from(data: JSON) -> Usage | None:
    if not isinstance(data, dict):
        return None
    prompt = token_count(data.get("prompt_tokens") or 0, "prompt_tokens")
    completion = token_count(data.get("completion_tokens") or 0, "completion_tokens")
    details = data.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cdetails = data.get("completion_tokens_details")
    reasoning = cdetails.get("reasoning_tokens") if isinstance(cdetails, dict) else None
    return Usage(
        prompt,
        completion,
        None if cached is None else token_count(cached, "prompt_tokens_details.cached_tokens"),
        None if reasoning is None else token_count(reasoning, "completion_tokens_details.reasoning_tokens"),
    )


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

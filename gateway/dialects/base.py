"""What an ingress dialect is: a sans-IO codec between one vendor's client-facing wire format and the
internal request/answer, plus that vendor's error envelope and stream framing.

The web layer only ever talks to this protocol; it never branches on a vendor name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.core.errors import GatewayError
from gateway.core.request import Feature, InternalRequest, Operation
from gateway.core.response import Completion, Frame, StreamEvent, Usage

JSON = Any


class StreamEncoder(Protocol):
    """Turns internal stream events into the bytes of one client's stream, in order."""

    def event(self, event: StreamEvent) -> bytes: ...

    def end(self) -> bytes: ...

    @property
    def continuable(self) -> bool:
        """Whether what a continuation (a stream resumed on another target) adds can follow what was
        written so far; if not, a break ends the stream with ``error``, never with a false ending."""
        ...

    def error(self, err: GatewayError) -> bytes:
        """The in-band form of an error raised after the first byte was sent."""
        ...

    @property
    def cut_after_error(self) -> bool:
        """Whether the body ends cut short after ``error``, without HTTP's last chunk: for SDKs that
        skip an error chunk they cannot parse and would read a clean end as a complete answer."""
        ...


@dataclass(frozen=True, slots=True)
class ErrorReply:
    status: int
    body: JSON
    headers: dict[str, str] = field(default_factory=dict)


class ChunkReader(Protocol):
    """An upstream's stream chunks (parsed JSON) → internal events, statefully."""

    @property
    def relaying(self) -> bool:
        """Chunks that need nothing translated may go to the client as they came (``relay``)."""
        ...

    @property
    def started(self) -> bool:
        """The stream's first chunk (its identity) has been decoded."""
        ...

    @property
    def finished(self) -> bool:
        """At least one choice reported its end (Anthropic's: and then ``message_stop`` came): a
        stream whose wire ends without ``[DONE]`` (``Wire.done_sentinel``) is complete if it stops
        after this."""
        ...

    @property
    def usage(self) -> Usage | None:
        """The usage the upstream reported so far (the last report wins); None before any."""
        ...

    def relay(self, data: bytes) -> Frame | None:
        """One chunk's raw JSON → its frame in the client's stream, unchanged, when the client speaks
        this upstream's format (``InternalRequest.relay``) and the chunk needs nothing translated;
        None: decode it."""
        ...

    def relay_run(self, buffer: bytes) -> tuple[Frame, int] | None:
        """``relay`` for the whole events that open a network read, at once: their frame and the bytes
        they take, or None."""
        ...

    def same_shape(self, buffer: bytes) -> bool:
        """``buffer`` (a read at an event boundary) is one event to relay as it is, a ``Token``: the
        shape of the last ``Frame`` that carried one, around another plain text."""
        ...

    def decode(self, data: JSON) -> list[StreamEvent]: ...

    def finish(self) -> list[StreamEvent]: ...


class Wire(Protocol):
    """The egress side of one vendor's wire format: what an upstream of that vendor is sent and how
    its answers read. Sans-IO; ``adapters/http.py`` does the IO for every vendor."""

    @property
    def features(self) -> frozenset[Feature]: ...

    @property
    def extras(self) -> frozenset[Feature]:
        """What a target of this vendor may add with ``extra_features`` (served by a plugin the
        upstream loads, or by its model: a reasoning model's effort); any other name is a config error."""
        ...

    @property
    def done_sentinel(self) -> bool:
        """The vendor ends streams with ``[DONE]``; without it, a stream must end after a finish."""
        ...

    def path(self, operation: Operation) -> str: ...

    def headers(self, key: str | None, team: str | None, request: InternalRequest) -> dict[str, str]: ...

    def encode(self, request: InternalRequest, model: str) -> dict[str, JSON]: ...

    def decode(self, data: JSON, request: InternalRequest) -> Completion: ...

    def reader(self, request: InternalRequest) -> ChunkReader: ...


class Counting(Protocol):
    """How a target counts a prompt's tokens itself (``POST /v1/messages/count_tokens``), sans-IO: the
    URL and body of the question, made from what its ``Wire`` would send, and the count in its answer
    (None when the answer holds none). ``adapters/http.py`` asks it."""

    def url(self, base_url: str, wire: Wire) -> str: ...

    def body(self, request: InternalRequest, wire: Wire, model: str) -> dict[str, JSON]: ...

    def read(self, data: JSON) -> int | None: ...


def count_in(data: JSON, name: str) -> int | None:
    """A count an answer holds under ``name``: a whole number, never a bool."""
    n = data.get(name) if isinstance(data, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


class Dialect(Protocol):
    @property
    def name(self) -> str:
        """Bounded identifier: metric label and log field."""
        ...

    @property
    def auth_header(self) -> str: ...

    @property
    def bearer_too(self) -> bool:
        """The key may also come as ``Authorization: Bearer`` when ``auth_header`` is absent."""
        ...

    @property
    def team_header(self) -> str | None: ...

    @property
    def id_header(self) -> str:
        """The answer's header its SDKs read the request's id from; every answer carries
        ``X-Request-Id`` as well (``id_headers``)."""
        ...

    def select(self, body: dict[str, JSON], headers: Mapping[str, str]) -> Dialect:
        """The dialect that actually answers: paths shared by several SDKs are told apart here."""
        ...

    def parse(self, operation: Operation, body: dict[str, JSON], flavour: str) -> InternalRequest: ...

    def render(self, request: InternalRequest, completion: Completion) -> JSON: ...

    def encoder(self, request: InternalRequest) -> StreamEncoder: ...

    def error(self, err: GatewayError) -> ErrorReply: ...


class ModelShapes(Protocol):
    """A dialect's answers to ``GET .../models`` and ``GET .../models/{id}``, given the names the caller
    may see; ``canonical`` is a configured alias's model name (a vendor may list by model id)."""

    def listing(
        self, names: Sequence[str], canonical: Callable[[str], str], now: int, query: Iterable[tuple[str, str]]
    ) -> JSON: ...

    def card(self, name: str, canonical: Callable[[str], str], now: int) -> JSON: ...


def id_headers(dialect: Dialect, rid: str) -> dict[str, str]:
    """The request id's headers for ``dialect``'s clients: ``X-Request-Id``, and the dialect's own."""
    return {"X-Request-Id": rid, dialect.id_header: rid}


def bearer_token(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def retry_headers(err: GatewayError) -> dict[str, str]:
    headers = dict(err.headers)
    retry_after = getattr(err, "retry_after", None)
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return headers

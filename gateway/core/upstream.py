"""The contract between the gateway's core and whatever produces completions.

An ``Upstream`` is one configured target: an upstream vendor adapter (``adapters/``) or a local vLLM
backend (``backends/``). It is built once at start-up, owns its connection pool, and declares which
``Feature``s it can honour. The core checks features before calling, so adapters never see a request
they cannot serve faithfully.

``Call`` carries what one attempt needs besides the request: its deadline and request id, which
``Call.hop`` turns into per-hop timeouts and ``Call.timed_out`` tells apart from the target's own when
a bound fires. Upstreams raise only ``GatewayError`` subclasses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Generic, Protocol, TypeVar

from gateway.core.errors import DeadlineExceeded, GatewayError, UpstreamTimeout
from gateway.core.records import record
from gateway.core.request import Feature, InternalRequest
from gateway.core.response import Batch, Completion


@record
class Call:
    request_id: str
    # on the event loop's clock (``loop.time()``), the one every time bound of the gateway is filed on:
    # uvloop's lags time.monotonic() by up to a coarse clock tick and a busy loop turn, so a bound
    # that fired at the deadline would otherwise see milliseconds left and blame the upstream.
    # None = no client deadline
    deadline: float | None = None
    model: str | None = None  # upstream model name, when routing chose it (``vendor/model`` names)
    session: str | None = None  # the client's session id (``X-Session-Id``), for replica affinity
    # headers that carry the attempt's trace context upstream (W3C ``traceparent``, ``tracestate``)
    trace: tuple[tuple[str, str], ...] = ()
    ttft: float | None = None  # the team's ceiling on a target's first-token deadline, seconds
    resume: bool | None = None  # the client's ``X-Gateway-Resume``: None = the model's own setting

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - asyncio.get_running_loop().time()

    def hop(self, seconds: float) -> float:
        """A per-hop timeout cut to what is left of the deadline; an expired deadline raises."""
        remaining = self.remaining()
        if remaining is None:
            return seconds
        if remaining <= 0:
            raise DeadlineExceeded("the request's deadline expired")
        return min(seconds, remaining)

    def timed_out(self, target: str, what: str) -> GatewayError:
        """What a bound that fired means: the request's deadline (within a millisecond: the bound was cut
        to it) or the target's own timeout."""
        remaining = self.remaining()
        if remaining is not None and remaining <= 0.001:
            return DeadlineExceeded("the request's deadline expired")
        return UpstreamTimeout(f"target '{target}': {what}")


class Upstream(Protocol):
    @property
    def name(self) -> str:
        """Target id: unique per config, used in logs, metrics and error messages."""
        ...

    @property
    def provider(self) -> str:
        """Registry key of the adapter kind (``openai``, ``vllm``, ``friendli``...)."""
        ...

    @property
    def features(self) -> frozenset[Feature]: ...

    async def complete(self, request: InternalRequest, call: Call) -> Completion: ...

    def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        """Events of one answer, in batches: all that one network read brought, so the client gets one
        write per read (the stream's first event may come in a batch of its own, ``Then.REST``, the
        rest of its read right after). Errors before the first batch may be retried elsewhere. A batch
        is ``Then.END`` only if nothing follows it: the client's answer then ends with it, and the
        stream is closed unread. A wrapper keeps ``then`` on the batch it was given or makes it MORE."""
        ...

    async def start(self) -> None:
        """Begin background work (replica scrapes, engine start-up) inside the running loop, once."""
        ...

    async def list_models(self) -> list[str]:
        """What the upstream says it serves; raises ``UpstreamError`` when unreachable."""
        ...

    async def close(self) -> None: ...


class Configured(Protocol):
    """What an upstream's identity is made of: its configured target (``runtime.config.Target``)."""

    @property
    def name(self) -> str | None: ...

    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str | None: ...


T = TypeVar("T", bound=Configured)


class Identity(Generic[T]):
    """The identity every upstream kind shares, written once (HTTP targets, replica pools, the mock,
    the in-process engine): the target it was configured as, the model name it asks for, its id (the
    target's ``name``, else ``provider:model``), its provider and the features it serves.

    A subclass calls ``identify`` first in its constructor and sets ``_features`` once it knows them.
    """

    target: T
    model: str
    _name: str
    _features: frozenset[Feature]

    def identify(self, target: T, public_model: str) -> None:
        self.target = target
        self.model = target.model or public_model
        self._name = target.name or f"{target.provider}:{self.model}"

    @property
    def name(self) -> str:
        return self._name

    @property
    def provider(self) -> str:
        return self.target.provider

    @property
    def features(self) -> frozenset[Feature]:
        return self._features


class ReplicaGauges(Protocol):
    """What a pool of replicas reports about its members. The web layer passes in its Prometheus gauges,
    so backends need not know the metrics module."""

    def replica_up(self, target: str, replica: str, up: bool) -> None: ...

    def replica_load(self, target: str, replica: str, running: float, waiting: float, kv_usage: float) -> None:
        """The engine's own figures from its last scrape: requests running and waiting, KV-cache use (0-1)."""
        ...


class NoGauges:
    """Reports nothing: for pools built outside an app (tests, tools)."""

    def replica_up(self, target: str, replica: str, up: bool) -> None:
        pass

    def replica_load(self, target: str, replica: str, running: float, waiting: float, kv_usage: float) -> None:
        pass

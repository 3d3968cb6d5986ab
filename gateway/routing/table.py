"""The model table: which targets serve a public model name, in which order to try them, and which
targets are cooling down after repeated failures.

Names resolve in this order: an exact public name or alias; for ``vendor/model[/deployment]`` (SGP
style) the name without its deployment (which becomes the adapter), then the bare ``model``; then a
configured upstream vendor named by the prefix (``openai/gpt-4o-mini`` → the OpenAI vendor target
with upstream model ``gpt-4o-mini``); then the local catch-all target, if one is configured (the
embedded default's local vLLM) — unless exactly one vendor is configured and the catch-all has never
listed the name: then that vendor (``gpt-4o-mini`` → OpenAI when only its key is set).

Compiled once at start-up; resolution is a few dict look-ups.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

from gateway.core.errors import GatewayError, InvalidRequest, ModelNotFound, NoHealthyTarget, UpstreamCredentials
from gateway.core.records import record
from gateway.core.request import Operation
from gateway.core.upstream import Upstream

FAILURES_TO_COOL = 3
COOLDOWN_SECONDS = 10.0


@dataclass(slots=True)
class Health:
    """Consecutive failures and cool-down of one target (a simple circuit breaker)."""

    failures: int = 0
    cool_until: float = 0.0
    cause: str = ""  # the last failure's message: a cooling target's 503 says what is wrong with it
    code: str = ""  # the last failure's error code
    hint: str = ""  # the last failure's operator hint (its address, what fixes it): /status only

    def available(self, now: float) -> bool:
        return now >= self.cool_until

    def failed(self, now: float, err: GatewayError | None = None) -> bool:
        if err is not None:
            self.cause, self.code, self.hint = err.message, err.code, err.hint
        self.failures += 1
        if self.failures >= FAILURES_TO_COOL:
            self.failures = 0
            self.cool_until = now + COOLDOWN_SECONDS
            return True
        return False

    def succeeded(self) -> None:
        self.failures = 0


@dataclass(slots=True)
class Route:
    public: str
    upstreams: list[Upstream]
    weights: list[float]
    upstream_model: str | None = None  # set for vendor routes built from a ``vendor/model`` name
    label: str = ""  # bounded metric label: the configured name, ``vendor/*`` or ``local``
    resume: bool | None = None  # mid-stream resume (``routing/resume.py``): None = where a target can
    max_resumes: int = 2
    kind: str | None = None  # "chat" or "embedding", as configured; None: a name routed by its form

    def __post_init__(self) -> None:
        self.label = self.label or self.public


@record
class Resolved:
    route: Route
    adapter: str | None = None


def check_kind(route: Route, operation: Operation) -> None:
    """A chat request to an embedding model, or the reverse, is the client's error, named in the
    message too (Anthropic's and Friendli's envelopes carry no field of their own)."""
    if route.kind is None or (route.kind == "embedding") == (operation is Operation.EMBEDDING):
        return
    if route.kind == "embedding":
        why = f"'model': {route.public!r} is an embedding model: send it to /v1/embeddings"
    else:
        why = f"'model': {route.public!r} is a chat model: /v1/embeddings needs a model of kind embedding"
    raise InvalidRequest(why, param="model")


def _all_cooling(route: Route, health: dict[str, Health], now: float) -> NoHealthyTarget:
    """The 503 of a route whose targets all cool down: when it ends, and the cause that started it."""
    cooling = [health[u.name] for u in route.upstreams if u.name in health and not health[u.name].available(now)]
    ends = min((h.cool_until for h in cooling), default=now)
    causes = [h.cause for h in cooling if h.cause]
    last = f"; last failure: {causes[0]}" if causes else ""
    wait = max(1, math.ceil(ends - now))
    err = NoHealthyTarget(
        f"every target of model {route.public!r} is cooling down after repeated failures (retry in {wait} s){last}"
    )
    err.headers["Retry-After"] = str(wait)
    return err


@dataclass(slots=True)
class ModelTable:
    routes: dict[str, Route]
    vendors: dict[str, Upstream] = field(default_factory=dict)
    catch_all: Upstream | None = None
    default_model: str | None = None
    health: dict[str, Health] = field(default_factory=dict)
    listed: dict[str, frozenset[str]] = field(default_factory=dict)  # target → models, at its last answered probe

    @property
    def fallback(self) -> str | None:
        """The vendor that takes what the catch-all does not serve: the only one configured, if any."""
        if self.catch_all is None or len(self.vendors) != 1:
            return None
        return next(iter(self.vendors))

    def resolve(self, name: str) -> Resolved:
        if not name and self.default_model is not None:
            name = self.default_model
        route = self.routes.get(name)
        if route is not None:
            return Resolved(route)
        parts = name.split("/")
        if len(parts) == 3:
            for candidate in ("/".join(parts[:2]), parts[1]):
                if candidate in self.routes:
                    return Resolved(self.routes[candidate], adapter=parts[2])
        if len(parts) >= 2:
            if parts[1] in self.routes:
                return Resolved(self.routes[parts[1]], adapter=parts[2] if len(parts) == 3 else None)
            vendor = self.vendors.get(parts[0])
            if vendor is not None:
                model = "/".join(parts[1:])
                return Resolved(Route(name, [vendor], [1.0], upstream_model=model, label=f"{parts[0]}/*"))
        if self.catch_all is not None and name:
            vendor_name = self.fallback
            if vendor_name is not None and name not in self.listed.get(self.catch_all.name, ()):
                route = Route(name, [self.vendors[vendor_name]], [1.0], upstream_model=name, label=f"{vendor_name}/*")
                return Resolved(route)
            return Resolved(Route(name, [self.catch_all], [1.0], upstream_model=name, label="local"))
        raise ModelNotFound(f"model {name!r} is not served by this gateway", param="model")

    def order(self, route: Route) -> list[Upstream]:
        """Targets to try: one weighted pick first, then the rest by weight; cooling ones last-resort."""
        if len(route.upstreams) == 1:  # most routes: no pick, and no clock unless it ever cooled
            only = route.upstreams[0]
            health = self.health.get(only.name)
            if health is None or not health.cool_until:
                return [only]
            now = time.monotonic()
            if health.available(now):
                return [only]
            raise _all_cooling(route, self.health, now)
        now = time.monotonic()
        ready = [(u, w) for u, w in zip(route.upstreams, route.weights, strict=True) if self._health(u).available(now)]
        if not ready:
            raise _all_cooling(route, self.health, now)
        if len(ready) == 1:
            return [ready[0][0]]
        pool = list(ready)
        ordered: list[Upstream] = []
        while pool:
            pick = random.choices(range(len(pool)), weights=[w for _, w in pool])[0]
            ordered.append(pool.pop(pick)[0])
        return ordered

    def down(self, route: Route) -> NoHealthyTarget | None:
        """The route's 503 while every one of its targets cools down (a model's queue sheds on it)."""
        now = time.monotonic()
        for u in route.upstreams:
            health = self.health.get(u.name)
            if health is None or health.available(now):
                return None
        return _all_cooling(route, self.health, now)

    def _health(self, upstream: Upstream) -> Health:
        h = self.health.get(upstream.name)
        if h is None:
            h = self.health[upstream.name] = Health()
        return h

    def failed(self, upstream: Upstream, err: GatewayError | None = None) -> bool:
        """Record a failure (and its error, to explain a cool-down); True when it put the target in cool-down."""
        return self._health(upstream).failed(time.monotonic(), err)

    def succeeded(self, upstream: Upstream) -> None:
        self._health(upstream).succeeded()

    def noted(self, upstream: Upstream, err: GatewayError) -> None:
        """A failed probe: its error explains the target on /status, counting no failure (only
        requests cool a target down)."""
        h = self._health(upstream)
        h.cause, h.code, h.hint = err.message, err.code, err.hint

    def keys_changed(self) -> list[str]:
        """An upstream key was re-read with a new value: targets cooling because their key was refused
        get the next request at once (refused again, they cool again). The targets released."""
        released = [n for n, h in self.health.items() if h.cool_until and h.code == UpstreamCredentials.code]
        for name in released:
            self.health[name] = Health()
        return released

    def public_names(self) -> list[str]:
        return sorted(self.routes)

    def upstreams(self) -> list[Upstream]:
        seen: dict[str, Upstream] = {}
        for route in self.routes.values():
            for u in route.upstreams:
                seen.setdefault(u.name, u)
        for u in self.vendors.values():
            seen.setdefault(u.name, u)
        if self.catch_all is not None:
            seen.setdefault(self.catch_all.name, self.catch_all)
        return list(seen.values())

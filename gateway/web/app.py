"""The composition root: the only module that knows every part. It turns a config into an aiohttp
application — key ring, compiled model table, upstream sessions, route table, background prober —
all built once at start-up and torn down in ``cleanup_ctx``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from aiohttp import web

from adapters import PROVIDERS, HTTPUpstream, counting_for, native_for, wire_for
from backends import ENGINE_EXTRAS, ENGINES
from backends.pool.replicas import ReplicaPool
from gateway.core.upstream import Upstream
from gateway.limits import build_admission, team_policies
from gateway.limits.admission import running as admission_running
from gateway.limits.fairq_policy import FairQueues, fair_policy
from gateway.limits.fairq_policy import running as fair_running
from gateway.obs import metrics, tracing
from gateway.obs.metrics import REDIS_STATE, ReplicaGaugeSet, set_config_info
from gateway.obs.routing import Routing
from gateway.policy.access import ModelAccess
from gateway.policy.audit import AuditTrail
from gateway.policy.auth import KeyRing
from gateway.policy.keystore import Authenticator, LocalStore, RedisStore, Store
from gateway.routing.capabilities import check_extra_features
from gateway.routing.table import ModelTable, Route
from gateway.runtime.config import ConfigError, GatewayConfig, Target, Vendor
from gateway.runtime.config_environment import check_environment, key_hashes
from gateway.runtime.memory_budget import MemoryBudget
from gateway.runtime.secrets import Secrets
from gateway.store.redis_client import close_redis, redis_client
from gateway.web import admin, models, ops, reload, responses, spend_report, status, stored, unrouted
from gateway.web.count_tokens import count_tokens
from gateway.web.pipeline import RouteHandler
from gateway.web.routes import COUNT_TOKENS_PATH, MODEL_LIST_PATHS, OWNERS, ROUTES
from gateway.web.state import GATEWAY, Gateway, Generation

log = logging.getLogger("gateway")
CUT_SECONDS = 2.0  # for requests cut at the drain's end to write their error
# Bodies are decoded by gateway.web.body (auto_decompress off); after an early answer (408, 413) the
# rest of a body is read and dropped for at most a second, not aiohttp's ten.
HANDLER_ARGS = {"auto_decompress": False, "lingering_time": 1.0}


def known_providers() -> list[str]:
    return sorted({*PROVIDERS, *ENGINES})


def check_target(target: Target) -> None:
    """What pydantic cannot know: the provider exists, and the target says where it runs its way."""
    if target.provider in ENGINES:
        if target.base_url or target.replicas:
            raise ConfigError(f"provider {target.provider!r} runs in this process: give 'engine' (its arguments)")
    elif target.provider not in PROVIDERS:
        raise ConfigError(f"unknown provider {target.provider!r} (known: {', '.join(known_providers())})")
    elif target.engine is not None:
        engines = ", ".join(sorted(ENGINES))
        raise ConfigError(f"'engine' is for in-process providers ({engines}), not {target.provider!r}")
    elif not (target.base_url or target.replicas):
        raise ConfigError(f"provider {target.provider!r} talks HTTP: give exactly one of 'base_url' or 'replicas'")
    extras = (
        ENGINE_EXTRAS.get(target.provider, frozenset())
        if target.provider in ENGINES
        else PROVIDERS[target.provider].extras
    )
    check_extra_features(target.extra_features, extras, target.provider)


def check_targets(config: GatewayConfig, source: str) -> None:
    """Each target's provider exists and is configured its way, the error naming the file and target."""
    for entry in config.models:
        for i, target in enumerate(entry.targets):
            try:
                check_target(target)
            except ConfigError as exc:  # a message opening with "." extends the key path
                sep = "" if str(exc).startswith(".") else ": "
                raise ConfigError(f"{source}: models[{entry.name!r}].targets[{i}]{sep}{exc}") from None


def build_upstream(
    target: Target,
    public: str,
    budget: MemoryBudget | None = None,
    secrets: Secrets | None = None,
    redis: Any | None = None,
    routing: Routing | None = None,
) -> Upstream:
    """``budget``: what the HTTP targets' whole answers may hold together (a target alone gets its own);
    ``secrets``: the app's credentials, shared so that a changed key file reaches every target using it;
    ``redis``: the client replica pools share their prefix index through (``kv-shared``);
    ``routing``: the app's routing figures, which replica pools report to."""
    check_target(target)
    if target.provider in ENGINES:
        try:
            return ENGINES[target.provider](target, public)
        except ImportError as exc:
            raise ConfigError(f"provider {target.provider!r} needs an optional extra: {exc}") from None
    wire = wire_for(target)
    secret = secrets.for_target(target) if secrets is not None else None
    if target.replicas:
        return ReplicaPool(
            target,
            public,
            wire,
            lambda t, p, w: HTTPUpstream(t, p, w, budget, secret, native_for(t), counting_for(t)),
            ReplicaGaugeSet(),
            redis,
            routing.pool if routing is not None else None,
        )
    return HTTPUpstream(target, public, wire, budget, secret, native_for(target), counting_for(target))


def vendor_target(name: str, vendor: Vendor) -> Target:
    return Target(
        provider=vendor.provider, base_url=vendor.base_url, api_key_env=vendor.api_key_env, name=f"vendor:{name}"
    )


def unique_names(config: GatewayConfig) -> dict[tuple[str, int], str]:
    """Target ids: ``name`` if configured, else ``provider:model``, numbered when that repeats; they key
    health, logs and metrics, so two targets must never share one."""
    names: dict[tuple[str, int], str] = {}
    seen: dict[str, int] = {}
    for entry in config.models:
        for i, t in enumerate(entry.targets):
            base = t.name or f"{t.provider}:{t.model or entry.name}"
            seen[base] = seen.get(base, 0) + 1
            names[(entry.name, i)] = base if seen[base] == 1 else f"{base}#{seen[base]}"
    return names


class Builder:
    """Builds the upstreams of one config, taking over from ``reuse`` (the previous generation's, by
    the identity of their config) those whose config did not change: they keep their connection
    pools, health and replica scrapers across a reload. ``built`` is the new generation's set."""

    def __init__(
        self,
        budget: MemoryBudget,
        secrets: Secrets | None = None,
        reuse: Mapping[str, Upstream] | None = None,
        redis: Any | None = None,
        routing: Routing | None = None,
    ) -> None:
        self.budget, self.secrets, self.reuse, self.redis = budget, secrets, reuse or {}, redis
        self.routing = routing
        self.built: dict[str, Upstream] = {}

    def upstream(self, target: Target, public: str) -> Upstream:
        identity = f"{public}\n{target.model_dump_json()}"
        upstream = self.built.get(identity) or self.reuse.get(identity)
        if upstream is None:
            upstream = build_upstream(target, public, self.budget, self.secrets, self.redis, self.routing)
        self.built[identity] = upstream
        return upstream


def build_table(config: GatewayConfig, catch_all: Target | None = None, builder: Builder | None = None) -> ModelTable:
    routes: dict[str, Route] = {}
    names = unique_names(config)
    # one budget for the process: every target draws on it
    build = builder or Builder(MemoryBudget(config.server.max_buffered_bytes))
    for entry in config.models:
        upstreams = [
            build.upstream(t.model_copy(update={"name": names[(entry.name, i)]}), entry.name)
            for i, t in enumerate(entry.targets)
        ]
        route = Route(
            entry.name,
            upstreams,
            [t.weight for t in entry.targets],
            resume=entry.resume,
            max_resumes=entry.max_resumes,
            kind=entry.kind,
        )
        for name in (entry.name, *entry.aliases):
            routes[name] = route
    vendors = {name: build.upstream(vendor_target(name, v), name) for name, v in config.vendors.items()}
    return ModelTable(
        routes=routes,
        vendors=vendors,
        catch_all=build.upstream(catch_all, "") if catch_all is not None else None,
        default_model=config.models[0].name if config.models else None,
    )


def build_keys(config: GatewayConfig) -> KeyRing:
    entries = [(team.id, key_id, digest) for team in config.teams for key_id, digest in key_hashes(team)]
    return KeyRing.from_hashes(entries, open_access=config.auth == "none")


def build_generation(
    config: GatewayConfig, catch_all: Target | None, version: int, store: Store, builder: Builder
) -> Generation:
    """One config compiled; raises ``ConfigError`` for what only building shows (a key variable unset,
    an engine's extra missing). ``store``: the issued keys, which outlive every generation."""
    keys = build_keys(config)
    models = build_table(config, catch_all, builder)
    return Generation(
        version=version,
        digest=reload.config_digest(config),
        config=config,
        keys=keys,
        auth=Authenticator(keys, store, frozenset(t.id for t in config.teams)),
        models=models,
        model_access=ModelAccess(
            {t.id: t.models for t in config.teams}, {a: m.name for m in config.models for a in m.aliases}
        ),
        policies=team_policies(config),
        admin_digest=admin.admin_digest(config) or "",
        upstreams=builder.built,
    )


def build_state(config: GatewayConfig, catch_all: Target | None = None) -> Gateway:
    client = redis_client(config.redis) if config.redis is not None else None
    store = RedisStore(client) if client is not None else LocalStore()
    secrets = Secrets()
    routing = Routing()
    builder = Builder(MemoryBudget(config.server.max_buffered_bytes), secrets, redis=client, routing=routing)
    return Gateway(
        gen=build_generation(config, catch_all, 1, store, builder),
        access=logging.getLogger("gateway.access"),
        admission=build_admission(config, client),
        redis=client,
        tracer=tracing.build(config.tracing),
        secrets=secrets,
        budget=builder.budget,
        audit=AuditTrail(client),
        routing=routing,
        conversations=stored.build(client, config.responses),
        fair=FairQueues(fair_policy(config), client),
    )


def rebuild(gw: Gateway, config: GatewayConfig, source: str) -> Generation:
    """The next generation from a reloaded config, checked as ``check-config`` checks a file; the
    targets whose config did not change are taken over with their pools and health."""
    check_targets(config, source)
    check_environment(config, source)
    old = gw.gen
    builder = Builder(gw.budget, gw.secrets, old.upstreams, gw.redis, gw.routing)
    try:
        gen = build_generation(config, None, old.version + 1, old.auth.store, builder)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    # Health goes with a target taken over, not with a new one that only shares its name.
    kept = {u.name for identity, u in gen.upstreams.items() if identity in old.upstreams}
    gen.models.health.update({n: h for n, h in old.models.health.items() if n in kept})
    gen.models.listed.update({n: m for n, m in old.models.listed.items() if n in kept})
    return gen


async def connect_redis(gw: Gateway) -> None:
    """Say at start-up whether Redis is there; the gateway serves either way (failure policy)."""
    if gw.redis is None:
        log.info("no redis configured: keys and limits live in this process")
        return
    try:
        if hasattr(gw.redis, "initialize"):
            await gw.redis.initialize()  # a cluster client learns its slots once, not per request
        await gw.redis.ping()
        REDIS_STATE.n = 1
        log.info("redis reachable")
    except Exception as exc:  # serve anyway: limits follow their failure policy
        REDIS_STATE.n = 0
        log.warning("redis unreachable at start-up (%s): limits follow their failure policy", type(exc).__name__)


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    gw = app[GATEWAY]
    await connect_redis(gw)
    await asyncio.gather(*(u.start() for u in gw.models.upstreams()))
    await ops.probe(gw)  # which logs each target's reachability, as it does every change of it
    tasks = [
        asyncio.create_task(ops.prober(gw), name="prober"),
        asyncio.create_task(metrics.flusher(*gw.tallies()), name="metrics-flusher"),
        # ``capacity: auto`` models (a reload may add one): a pass over the queues a second, off the requests
        asyncio.create_task(ops.learn_capacities(gw), name="capacity-learner"),
    ]
    async with admission_running(gw.admission), fair_running(gw.fair), reload.running(app):
        # Only now, with SIGHUP taken: a worker's series says it serves this config and will reload.
        set_config_info(gw.gen.version, gw.gen.digest)
        yield
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    gw.backlog.drain()
    metrics.flush(*gw.tallies())
    try:
        await asyncio.gather(*(u.close() for u in gw.models.upstreams()))
    finally:
        if gw.redis is not None:
            await close_redis(gw.redis)
        if gw.tracer is not None:
            await gw.tracer.close()  # the spans of the last requests are exported


def create_app(
    config: GatewayConfig,
    catch_all: Target | None = None,
    config_path: str | None = None,
    siblings: Callable[[], None] | None = None,
) -> web.Application:
    """``config_path``: the file a reload reads (none: the embedded default, which does not reload);
    ``siblings``: tells the other worker processes to reload too (``--workers N``)."""
    app = web.Application(client_max_size=config.server.max_body_bytes, handler_args=HANDLER_ARGS)
    gw = app[GATEWAY] = build_state(config, catch_all)
    reload.install(app, reload.Reloader(gw, config_path, siblings, rebuild))
    for spec in ROUTES:
        app.router.add_route(spec.method, spec.path, RouteHandler(spec, gw.in_flight).handle)
    app.router.add_routes(responses.routes())
    models.install(app, MODEL_LIST_PATHS)
    app.router.add_post(COUNT_TOKENS_PATH, count_tokens)
    ops.install(app, config)
    admin.install(app)
    app.router.add_get("/status", status.status)
    app.router.add_get("/admin/spend", admin.guarded(spend_report.spend_report))
    unrouted.install(app, OWNERS)  # last: it takes every request no route above takes
    gw.backlog.currency = config.spend.currency  # of the costs in the request log and metrics
    app.on_shutdown.append(_drain)
    app.cleanup_ctx.append(_lifecycle)
    return app


async def _drain(app: web.Application) -> None:
    """On shutdown, once aiohttp has closed the listener: requests in flight run for the drain period,
    then what is left is cut, each in its dialect's error (never a clean end), while the connections
    are still open; /ready says 503 meanwhile to whoever asks on an open connection."""
    gw = app[GATEWAY]
    if gw.draining:  # drained already: ``listener.serve`` drains before it closes the connections
        return
    gw.draining = True
    seconds = gw.config.server.drain_seconds
    in_flight = len(gw.in_flight.tasks)
    log.info("draining: %d request(s) in flight, up to %g s", in_flight, seconds)
    started = time.monotonic()
    cut = await gw.in_flight.drain(seconds, CUT_SECONDS)
    took = round(time.monotonic() - started, 3)
    fields = {"event": "shutdown", "in_flight": in_flight, "cut": cut, "drain_seconds": took}
    log.info("shut down", extra={"fields": fields})  # the shutdown summary, once per worker

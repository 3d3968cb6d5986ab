"""Operational endpoints: ``/health`` (alive), ``/ready`` (some model can be served) and ``/metrics``,
plus the background prober that keeps target reachability and the models each target lists (what
``gateway.web.models`` shows) fresh without touching the request path.

``/metrics`` and ``/ready``'s detail name teams, models and targets. While the variable
``server.metrics_token_env`` names holds a token, ``/metrics`` answers only ``Authorization: Bearer
<token>`` (401 otherwise) and ``/ready`` gives everyone else its status code and ``{"ready": ...}``
alone, which is all a kubelet probe reads. ``/health`` stays open.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time

from aiohttp import web

from gateway.core.errors import GatewayError
from gateway.dialects.base import bearer_token
from gateway.dialects.common import dumps
from gateway.limits.fairq_policy import Learner
from gateway.obs.metrics import TARGET_UP, exposition, flush
from gateway.policy.auth import key_digest
from gateway.runtime.config import GatewayConfig
from gateway.web.state import GATEWAY, Gateway

log = logging.getLogger("gateway.ops")
PROBE_INTERVAL = 15.0
METRICS_DIGEST = web.AppKey("metrics_digest", bytes)  # b"" while /metrics and /ready are open


def install(app: web.Application, config: GatewayConfig) -> None:
    """The operational routes, and the metrics token's digest, read from the environment once."""
    var = config.server.metrics_token_env
    token = os.environ.get(var)
    app[METRICS_DIGEST] = key_digest(token) if token else b""
    if token:
        log.info("/metrics and /ready's detail need the metrics token (%s)", var)  # its name, never its value
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)


def token_holder(request: web.Request) -> bool:
    """Whether the request may see names: no token is configured, or it carries it. Digests of equal
    length are compared, so the time taken says nothing of the token, whatever bytes were sent."""
    expected = request.app[METRICS_DIGEST]
    if not expected:
        return True
    token = bearer_token(request.headers.get("Authorization"))
    return hmac.compare_digest(key_digest(token) if token else b"", expected)


async def probe(gw: Gateway) -> None:
    """One round: ask every target what it serves."""
    upstreams = gw.models.upstreams()
    results = await asyncio.gather(*(u.list_models() for u in upstreams), return_exceptions=True)
    for upstream, result in zip(upstreams, results, strict=True):
        ok = not isinstance(result, BaseException)
        TARGET_UP.labels(upstream.name, upstream.provider).set(1 if ok else 0)
        if isinstance(result, GatewayError):
            gw.models.noted(upstream, result)
        if gw.ready.get(upstream.name) != ok:
            hint = f"; {result.hint}" if isinstance(result, GatewayError) and result.hint else ""
            log.info("target %s is %s", upstream.name, "reachable" if ok else f"unreachable ({result}{hint})")
        gw.ready[upstream.name] = ok
        if ok:
            # Kept through a failed probe: a name the local vLLM served still goes there (and its error
            # says it is down) rather than to the fallback vendor, which would not know it.
            gw.models.listed[upstream.name] = frozenset(result)  # type: ignore[arg-type]
            if upstream is gw.models.catch_all:
                gw.discovered = list(result)  # type: ignore[arg-type]


async def prober(gw: Gateway) -> None:
    while True:
        try:
            await probe(gw)
        except Exception:  # a probe must never end the prober
            log.exception("probe round failed")
        await asyncio.sleep(PROBE_INTERVAL)


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=dumps(body), content_type="application/json")


async def health(request: web.Request) -> web.Response:
    return _json({"status": "ok"})


def limits_state(gw: Gateway) -> str:
    """Where limits are enforced right now: a Redis outage is a policy in force, not unreadiness."""
    if gw.redis is None:
        return "in-process (no redis configured)"
    up = getattr(gw.admission.limiter, "up", True)
    return "redis" if up else "redis unreachable: failure policy in force"


async def ready(request: web.Request) -> web.Response:
    """200 while at least one model can be served; the body says, model by model, which can and
    through which targets (``vendor/*``: the vendor routes; ``*``: the local catch-all), to the
    holder of the metrics token when one is configured."""
    gw = request.app[GATEWAY]
    table = gw.models
    models: dict[str, bool] = {}
    detail: dict[str, dict[str, bool]] = {}
    for name, route in table.routes.items():
        detail[name] = {u.name: gw.ready.get(u.name, False) for u in route.upstreams}
        models[name] = any(detail[name].values())
    for prefix, vendor in table.vendors.items():
        detail[f"{prefix}/*"] = {vendor.name: gw.ready.get(vendor.name, False)}
    if table.catch_all is not None:
        detail["*"] = {table.catch_all.name: gw.ready.get(table.catch_all.name, False)}
        if table.fallback is not None:
            detail["*"] |= detail[f"{table.fallback}/*"]
    serving = not gw.draining and any(any(targets.values()) for targets in detail.values())
    status = 200 if serving else 503
    if not token_holder(request):
        return _json({"ready": serving}, status)
    body = {
        "ready": serving,
        "draining": gw.draining,
        "models": models,
        "detail": detail,
        "targets": dict(gw.ready),
        "limits": limits_state(gw),
    }
    return _json(body, status)


async def metrics(request: web.Request) -> web.Response:
    if not token_holder(request):
        return web.Response(
            status=401,
            text="the metrics token is required",
            headers={"WWW-Authenticate": 'Bearer realm="llm-gateway-metrics"'},
        )
    gw = request.app[GATEWAY]
    gw.backlog.drain()  # the requests that ended since the last batch count too
    flush(*gw.tallies())  # this worker's tallies, on the loop that keeps them; the rendering, off it
    body, content_type = await asyncio.to_thread(exposition)
    return web.Response(body=body, headers={"Content-Type": content_type})


LEARN_SECONDS = 1.0  # how often ``capacity: auto`` models learn from their replicas' last scrapes
FRESH_SECONDS = 5.0  # older gauges teach nothing


async def learn_capacities(gw: Gateway) -> None:
    """``capacity: auto``: each such model's capacity from its replica pools' vLLM gauges
    (``gateway.limits.fairq_policy.Learner``), every ``LEARN_SECONDS``."""
    learner = Learner()
    while True:
        await asyncio.sleep(LEARN_SECONDS)
        fresh_since = time.monotonic() - FRESH_SECONDS
        for model, queue in list(gw.fair.queues.items()):
            route = gw.gen.models.routes.get(model)
            if not queue.settings.auto or route is None:
                continue
            replicas = [state for u in route.upstreams for state in getattr(u, "states", ())]
            capacity = learner.learn(model, replicas, fresh_since)
            if capacity is not None:
                gw.fair.learned(model, capacity, gw.config.limits.replicas)

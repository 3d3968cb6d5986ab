"""Operational endpoints: ``/health`` (alive), ``/ready`` (serving is possible) and the model lists,
plus the background prober that keeps target reachability fresh without touching the request path.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from gateway.core.errors import GatewayError
from gateway.dialects import OPENAI
from gateway.dialects.common import dumps
from gateway.obs.metrics import TARGET_UP, exposition, flush
from gateway.web.pipeline import credentials, error_response, request_id
from gateway.web.state import GATEWAY, Gateway

log = logging.getLogger("gateway.ops")
PROBE_INTERVAL = 15.0


async def probe(gw: Gateway) -> None:
    """One round: ask every target what it serves."""
    upstreams = gw.models.upstreams()
    results = await asyncio.gather(*(u.list_models() for u in upstreams), return_exceptions=True)
    for upstream, result in zip(upstreams, results, strict=True):
        ok = not isinstance(result, BaseException)
        TARGET_UP.labels(upstream.name, upstream.provider).set(1 if ok else 0)
        if gw.ready.get(upstream.name) != ok:
            log.info("target %s is %s", upstream.name, "reachable" if ok else f"unreachable ({result})")
        gw.ready[upstream.name] = ok
        if ok and upstream is gw.models.catch_all:
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
    gw = request.app[GATEWAY]
    models: dict[str, bool] = {}
    for name, route in gw.models.routes.items():
        models[name] = any(gw.ready.get(u.name, False) for u in route.upstreams)
    catch_all = gw.models.catch_all
    serving = all(models.values()) and (bool(models) or catch_all is None or gw.ready.get(catch_all.name, False))
    body = {"ready": serving, "models": models, "targets": dict(gw.ready), "limits": limits_state(gw)}
    return _json(body, 200 if serving else 503)


async def list_models(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    rid = request_id(request.headers)
    try:
        token, team = credentials(OPENAI, request.headers)
        await gw.auth.authenticate(token, team)
    except GatewayError as err:
        return error_response(OPENAI, err, rid)
    names = dict.fromkeys([*gw.models.public_names(), *gw.discovered])
    now = int(time.time())
    data = [{"id": n, "object": "model", "created": now, "owned_by": "llm-gateway"} for n in names]
    return _json({"object": "list", "data": data})


async def metrics(request: web.Request) -> web.Response:
    request.app[GATEWAY].backlog.drain()  # the requests that ended since the last batch count too
    flush()  # this worker's tallies, on the loop that keeps them; the rendering, off it
    body, content_type = await asyncio.to_thread(exposition)
    return web.Response(body=body, headers={"Content-Type": content_type})

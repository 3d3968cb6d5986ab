"""The admin API, its own auth realm: ``Authorization: Bearer <admin key>`` (config ``admin`` or
``LLM_GATEWAY_ADMIN_KEY``). Team keys are never admin keys. With no admin key configured the API
answers 403 to everyone.

    POST   /admin/keys                    {"teams": [...], "name": "...", "expires_in": seconds}
    GET    /admin/keys
    DELETE /admin/keys/{id}               revoke (every replica within a second)
    GET    /admin/teams
    GET    /admin/teams/{team}/usage?hours=24
    POST   /admin/reload                  reload the config file (every worker); 422 and the reason if refused
    GET    /admin/audit?limit=100         the audit trail, newest first
    GET    /admin/spend?group_by=team|key|model|target&period=day|week|month   (``gateway.web.spend_report``)

Every change (a key issued or revoked, a config reloaded) is an audit entry (``gateway/policy/audit.py``):
which admin credential made it (the first 8 hex of its key's SHA-256, never the key), the action, the
key's id, teams and label. An issued key's secret is in the answer only, never in a log line.
The admin key is the current config generation's: a reload may change it.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import pydantic
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from gateway.core.errors import GatewayError
from gateway.dialects.base import bearer_token
from gateway.dialects.common import dumps
from gateway.limits.plan import USAGE_BUCKET_SECONDS, usage_key
from gateway.obs.logs import iso_time
from gateway.policy.auth import hex_digest
from gateway.policy.keystore import new_key
from gateway.runtime.config import GatewayConfig
from gateway.web.reload import RELOADER
from gateway.web.state import GATEWAY, Gateway

# What Redis (keys, audit, usage and spend live there) raises when it cannot answer
STORE_FAILURES = (RedisError, OSError, TimeoutError)
Handler = Callable[[web.Request], Awaitable[web.Response]]
AUDIT_LIMIT = 1000  # entries one /admin/audit answer holds at most
ADMIN_ID_HEX = 8  # of the admin key's SHA-256: names the credential in audit lines, reveals nothing of it


MAX_EXPIRES_IN = 100 * 365 * 86400  # seconds: a key's lifetime is a date, never infinity or an overflow
MAX_NAME = 200  # characters of an issued key's label
MAX_TEAMS = 1000  # teams one issued key may serve


class NewKey(BaseModel):
    """Every field bounded, numbers finite: what is refused here is never stored."""

    model_config = ConfigDict(extra="forbid")
    teams: Annotated[list[Annotated[str, Field(max_length=MAX_NAME)]], Field(min_length=1, max_length=MAX_TEAMS)]
    name: Annotated[str, Field(max_length=MAX_NAME)] = ""
    expires_in: Annotated[float, Field(gt=0, le=MAX_EXPIRES_IN, allow_inf_nan=False)] | None = None


def admin_digest(config: GatewayConfig) -> str | None:
    if config.admin.key_sha256:
        return config.admin.key_sha256
    env = config.admin.key_env or "LLM_GATEWAY_ADMIN_KEY"
    key = os.environ.get(env)
    return hex_digest(key) if key else None


def reply(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=dumps(body), content_type="application/json")


def problem(status: int, message: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="llm-gateway-admin"'} if status == 401 else None
    return web.Response(
        status=status,
        body=dumps({"error": {"message": message, "type": "admin_error"}}),
        content_type="application/json",
        headers=headers,
    )


def guarded(handler: Callable[[web.Request, Gateway], Awaitable[web.Response]]) -> Handler:
    async def wrapped(request: web.Request) -> web.Response:
        gw = request.app[GATEWAY]
        expected = gw.gen.admin_digest
        if not expected:
            return problem(403, "the admin API is disabled: no admin key is configured")
        token = bearer_token(request.headers.get("Authorization"))
        presented = hex_digest(token) if token else ""
        if not hmac.compare_digest(presented, expected):
            return problem(401, "an admin key is required")
        try:
            return await handler(request, gw)
        except GatewayError as exc:  # the key store or the limits said they cannot answer
            return problem(exc.status, str(exc))
        except STORE_FAILURES as exc:  # Redis down or stalled: every admin path says so by name
            return problem(503, f"the admin API's store is unavailable ({type(exc).__name__})")

    return wrapped


def who(request: web.Request) -> str:
    """The admin credential that made a request, by its digest's first hex (``guarded`` checked it)."""
    token = bearer_token(request.headers.get("Authorization")) or ""
    return hex_digest(token)[:ADMIN_ID_HEX]


async def audit(request: web.Request, action: str, **fields: object) -> None:
    """One audit entry: who, what, on which key. Callers pass no secret."""
    await request.app[GATEWAY].audit.record(who(request), action, **fields)


IN_PROCESS_KEY = (
    "no redis in the config: this key lives only in this gateway process; it is lost when the process "
    "stops and unknown to other workers or replicas (docs/deployment.md#what-lives-in-redis)"
)


async def create_key(request: web.Request, gw: Gateway) -> web.Response:
    try:
        spec = NewKey.model_validate_json(await request.read())
    except pydantic.ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        return problem(400, f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}")
    unknown = [t for t in spec.teams if t not in gw.model_access.teams()]
    if unknown:
        return problem(400, f"unknown team {unknown[0]!r}")
    key, record = new_key(spec.teams, spec.name, spec.expires_in)
    await gw.auth.store.put(record)
    expires = iso_time(record.expires) if record.expires is not None else None
    await audit(request, "key.create", key_id=record.id, teams=record.teams, name=record.name or None, expires=expires)
    answer = {"key": key, **record.public(), "stored": "process" if gw.config.redis is None else "redis"}
    if gw.config.redis is None:
        answer["warning"] = IN_PROCESS_KEY
    return reply(answer, 201)


async def list_keys(request: web.Request, gw: Gateway) -> web.Response:
    return reply({"keys": [r.public() for r in await gw.auth.store.all()]})


async def revoke_key(request: web.Request, gw: Gateway) -> web.Response:
    record = await gw.auth.store.get(request.match_info["key_id"])
    if record is None:
        return problem(404, "no such key")
    already = record.revoked
    record.revoked = True
    await gw.auth.store.put(record)
    await audit(request, "key.revoke", key_id=record.id, teams=record.teams, already_revoked=already or None)
    return reply(record.public())


async def teams(request: web.Request, gw: Gateway) -> web.Response:
    out = [
        {
            "id": t.id,
            "models": list(t.models) if t.models is not None else None,
            "limits": t.limits.model_dump(exclude_none=True),
            "key_limits": t.key_limits.model_dump(exclude_none=True),
            "deadline": t.deadline,
            "budget": t.budget.model_dump(mode="json", exclude_none=True) if t.budget is not None else None,
            "key_budget": t.key_budget.model_dump(mode="json", exclude_none=True) if t.key_budget is not None else None,
            "static_keys": [k.id for k in t.keys],
        }
        for t in gw.config.teams
    ]
    return reply({"teams": out, "currency": gw.config.spend.currency})


async def usage(request: web.Request, gw: Gateway) -> web.Response:
    team = request.match_info["team"]
    if team not in gw.model_access.teams():
        return problem(404, "no such team")
    try:
        hours = max(1, min(24 * 35, int(request.query.get("hours", "24"))))
    except ValueError:
        return problem(400, "hours must be an integer")
    now = time.time()
    starts = [int(now // USAGE_BUCKET_SECONDS - i) * USAGE_BUCKET_SECONDS for i in range(hours)]
    counts = await gw.admission.limiter.usage([usage_key(team, s) for s in starts])
    buckets = []
    for start, c in zip(starts, counts, strict=True):
        if not c:
            continue
        keys: dict[str, dict[str, int]] = {}
        for name, value in c.items():
            if name.startswith("key:"):
                _, kid, what = name.split(":", 2)
                keys.setdefault(kid, {})[what] = value
        totals = {k: c.get(k, 0) for k in ("requests", "prompt_tokens", "completion_tokens")}
        buckets.append({"start": start, "seconds": USAGE_BUCKET_SECONDS, **totals, "keys": keys})
    return reply({"team": team, "buckets": buckets})


async def reload(request: web.Request, gw: Gateway) -> web.Response:
    outcome = await request.app[RELOADER].reload(who(request))
    if outcome.result == "refused":
        return reply({"error": {"message": outcome.reason, "type": "reload_refused"}, **outcome.public()}, 422)
    return reply(outcome.public())


async def audit_trail(request: web.Request, gw: Gateway) -> web.Response:
    try:
        limit = max(1, min(AUDIT_LIMIT, int(request.query.get("limit", "100"))))
    except ValueError:
        return problem(400, "limit must be an integer")
    try:
        entries = await gw.audit.recent(limit)
    except Exception as exc:  # Redis down: say so rather than answer 500
        return problem(503, f"the audit trail is unavailable ({type(exc).__name__})")
    return reply({"entries": [{**e, "time": iso_time(e["ts"])} for e in entries]})


def install(app: web.Application) -> None:
    app.router.add_post("/admin/keys", guarded(create_key))
    app.router.add_get("/admin/keys", guarded(list_keys))
    app.router.add_delete("/admin/keys/{key_id}", guarded(revoke_key))
    app.router.add_get("/admin/teams", guarded(teams))
    app.router.add_get("/admin/teams/{team}/usage", guarded(usage))
    app.router.add_post("/admin/reload", guarded(reload))
    app.router.add_get("/admin/audit", guarded(audit_trail))

"""The model list (``GET {base}/models``) and one model (``GET {base}/models/{model_id}``) on every base a
vendor SDK lists models under (``routes.MODEL_LIST_PATHS``): in OpenAI's shape, or Anthropic's when the
request carries ``anthropic-version`` (its SDKs always send it), with Anthropic's cursor pages.

Both show what the caller may use: the configured models, then what the local catch-all and each
reachable vendor serve now (under its prefix), less what the key's team may not use. A model outside
that is a 404 in the client's dialect, the same whether it does not exist or the team may not see it.
Not here: what a generation checks (``pipeline``), the probes that learn what targets serve (``ops``).
"""

from __future__ import annotations

import time
from functools import partial

from aiohttp import web

from gateway.core.errors import GatewayError, ModelNotFound
from gateway.dialects import ANTHROPIC
from gateway.dialects.anthropic import models as anthropic_models
from gateway.dialects.base import Dialect, ModelShapes, bearer_token, id_headers
from gateway.dialects.common import dumps
from gateway.dialects.openai import render as openai_render
from gateway.policy.auth import Principal
from gateway.web.pipeline import credentials, error_response, request_id
from gateway.web.routes import OWNERS
from gateway.web.state import GATEWAY, Gateway


def install(app: web.Application, bases: tuple[str, ...]) -> None:
    """The list on each base, and one model beside it: its id may hold ``/`` (``vendor/model``), sent
    as is or encoded as ``%2F`` (both SDKs encode it)."""
    for base in bases:
        app.router.add_get(base, list_models)
        app.router.add_get(base + "/{model_id:.+}", get_model)


# whose list and card shapes differ from OpenAI's, which every other dialect's clients read
SHAPES: dict[str, ModelShapes] = {ANTHROPIC.name: anthropic_models.SHAPES}


def _shapes(dialect: Dialect) -> ModelShapes:
    return SHAPES.get(dialect.name, openai_render.MODEL_SHAPES)


def _dialect(request: web.Request) -> Dialect:
    """Whose shapes the list and its errors take: Anthropic's when its SDK asks, else OpenAI's (on
    ``/v5`` too, whose list is OpenAI's shape)."""
    return OWNERS.named(request.headers)


async def _principal(gw: Gateway, dialect: Dialect, request: web.Request) -> Principal:
    """The caller, by its dialect's key header or, the list being every dialect's, by either key header
    (an SGP client sends ``x-api-key``, an OpenAI one a bearer token)."""
    token, team = credentials(dialect, request.headers)
    if token is None:
        token = bearer_token(request.headers.get("authorization")) or request.headers.get("x-api-key")
    return await gw.auth.authenticate(token, team)


def visible(gw: Gateway, principal: Principal) -> list[str]:
    """The models the principal may use, configured ones first, each once."""
    access = gw.model_access
    names = dict.fromkeys([*gw.models.public_names(), *reachable(gw)])
    return [n for n in names if access.allows(principal, n)]


def reachable(gw: Gateway) -> list[str]:
    """Names beyond the configured ones that would be served now: what the local catch-all lists, and
    each reachable vendor's models under its prefix."""
    table = gw.models
    names: list[str] = []
    if table.catch_all is not None and gw.ready.get(table.catch_all.name, False):
        names += sorted(table.listed.get(table.catch_all.name, ()))
    for prefix, vendor in sorted(table.vendors.items()):
        if gw.ready.get(vendor.name, False):
            names += [f"{prefix}/{m}" for m in sorted(table.listed.get(vendor.name, ()))]
    return names


def _json(body: object, dialect: Dialect, rid: str) -> web.Response:
    return web.Response(body=dumps(body), content_type="application/json", headers=id_headers(dialect, rid))


async def list_models(request: web.Request) -> web.Response:
    gw, rid, dialect = request.app[GATEWAY], request_id(request.headers), _dialect(request)
    try:
        names = visible(gw, await _principal(gw, dialect, request))
        body = _shapes(dialect).listing(names, partial(_canonical, gw), int(time.time()), request.query.items())
    except GatewayError as err:
        return error_response(dialect, err, rid)
    return _json(body, dialect, rid)


async def get_model(request: web.Request) -> web.Response:
    gw, rid, dialect = request.app[GATEWAY], request_id(request.headers), _dialect(request)
    name = request.match_info["model_id"]
    try:
        if name not in visible(gw, await _principal(gw, dialect, request)):
            raise ModelNotFound(f"model {name!r} does not exist or your team may not use it", param="model")
    except GatewayError as err:
        return error_response(dialect, err, rid)
    return _json(_shapes(dialect).card(name, partial(_canonical, gw), int(time.time())), dialect, rid)


def _canonical(gw: Gateway, name: str) -> str:
    """A configured alias's model name; any other name as it is."""
    route = gw.models.routes.get(name)
    return route.public if route is not None else name

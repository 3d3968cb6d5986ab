"""The stored Responses' own paths: ``GET``/``DELETE /v1/responses/{id}`` and
``GET /v1/responses/{id}/input_items``, for the team that made the response (``stored``); errors in
OpenAI's envelope.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.core.errors import GatewayError, InvalidRequest, StoreUnavailable
from gateway.dialects.common import dumps
from gateway.dialects.responses import RESPONSES
from gateway.web.pipeline import credentials
from gateway.web.state import GATEWAY
from gateway.web.stored import Conversations

JSON = Any


async def _team(request: web.Request) -> str:
    gw = request.app[GATEWAY]
    token, team = credentials(RESPONSES, request.headers)
    principal = await gw.gen.auth.authenticate(token, team)
    return principal.team


def _reply(body: JSON, status: int = 200) -> web.Response:
    return web.Response(status=status, body=dumps(body), content_type="application/json")


def _failed(err: GatewayError) -> web.Response:
    reply = RESPONSES.error(err)
    return web.Response(
        status=reply.status, body=dumps(reply.body), content_type="application/json", headers=reply.headers
    )


async def _stored(request: web.Request) -> tuple[Conversations, str, str, dict[str, JSON]]:
    conversations = request.app[GATEWAY].conversations
    team = await _team(request)
    rid = request.match_info["id"]
    return conversations, team, rid, await conversations.read(team, rid, None)


def _not_streamed(query: Any) -> None:
    """OpenAI streams a stored response's events again (``stream=true``, from ``starting_after``) for
    its background responses; the gateway keeps the response, not its events: refused by name, as
    an SDK's stream would otherwise end with no event and no error."""
    if query.get("stream", "false").lower() != "false":
        raise InvalidRequest("'stream': a stored response is not streamed again by this gateway", param="stream")


async def retrieve(request: web.Request) -> web.Response:
    try:
        _not_streamed(request.query)
        _, _, _, record = await _stored(request)
    except GatewayError as err:
        return _failed(err)
    return _reply(record["response"])


async def delete(request: web.Request) -> web.Response:
    try:
        conversations, team, rid, _ = await _stored(request)
        try:
            await conversations.store.delete(team, rid)
        except Exception as exc:
            raise StoreUnavailable(f"the response store is unreachable ({type(exc).__name__})") from None
    except GatewayError as err:
        return _failed(err)
    return _reply({"id": rid, "object": "response", "deleted": True})


def _page(items: list[JSON], query: Any) -> dict[str, JSON]:
    """OpenAI's cursor page over a response's input items: ``order`` (desc by default), ``after``,
    ``limit`` (1 to 100, 20 by default)."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be asc or desc", param="order")
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise InvalidRequest("'limit' must be an integer from 1 to 100", param="limit")
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise InvalidRequest(f"'after': item {after!r} is not an input item of this response", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    data = ordered[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > limit,
    }


async def input_items(request: web.Request) -> web.Response:
    try:
        _, _, _, record = await _stored(request)
        return _reply(_page(record["input"], request.query))
    except GatewayError as err:
        return _failed(err)


def routes() -> list[web.RouteDef]:
    return [
        web.get("/v1/responses/{id}", retrieve),
        web.delete("/v1/responses/{id}", delete),
        web.get("/v1/responses/{id}/input_items", input_items),
    ]

"""404 and 405: a request no route takes gets an error in the dialect its path belongs to (an SGP
path, SGP's envelope; anything else, OpenAI's), JSON like every other error, with the request id and
the overhead header, never aiohttp's plain text. ``parse_error`` does the same for a request
aiohttp's parser refuses (``gateway.runtime.internals.ParseErrors``): dialect from the path alone.

It is the last route of the table, matching every path and method, so that no middleware runs on the
requests the table does serve; routes added after it would never be reached (``install`` comes last
in ``web.app.create_app``).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from gateway.core.errors import GatewayError, HeaderFieldsTooLarge, MethodNotAllowed, NotFound, RequestError
from gateway.dialects import OPENAI
from gateway.dialects.base import Dialect
from gateway.web.pipeline import OVERHEAD_HEADER, RouteSpec, error_response, request_id

PATHS = web.AppKey("unrouted_paths", dict[str, list[str]])  # path → the methods routes serve on it


def dialect_for(path: str, routes: tuple[RouteSpec, ...]) -> Dialect:
    """The dialect of the route whose path shares most leading segments with ``path`` (at least all
    but its last); OpenAI's when none does."""
    parts = path.strip("/").split("/")
    best: Dialect = OPENAI
    shared = 0
    for spec in routes:
        theirs = spec.path.strip("/").split("/")
        n = 0
        while n < min(len(parts), len(theirs)) and parts[n] == theirs[n]:
            n += 1
        if n >= len(theirs) - 1 and n > shared:
            best, shared = spec.dialect, n
    return best


def parse_error(routes: tuple[RouteSpec, ...]) -> Callable[[str | None, int, str], web.Response]:
    """``answer(path, status, message)`` for a request the HTTP parser refused (``path`` None: none
    could be read), in that path's dialect."""

    def answer(path: str | None, status: int, message: str) -> web.Response:
        err = HeaderFieldsTooLarge(message) if status == HeaderFieldsTooLarge.status else RequestError(message)
        resp = error_response(dialect_for(path or "/", routes), err, request_id({}))
        resp.headers[OVERHEAD_HEADER] = "0.000"  # no step of the gateway's ran
        return resp

    return answer


def install(app: web.Application, routes: tuple[RouteSpec, ...]) -> None:
    async def unrouted(request: web.Request) -> web.Response:
        allowed = app[PATHS].get(request.path)
        err: GatewayError
        if allowed:
            err = MethodNotAllowed(f"{request.method} is not served on {request.path}: use {', '.join(allowed)}")
        else:
            err = NotFound(f"no such path: {request.method} {request.path[:200]}")
        resp = error_response(dialect_for(request.path, routes), err, request_id(request.headers))
        resp.headers[OVERHEAD_HEADER] = "0.000"  # no step of the gateway's ran
        if allowed:
            resp.headers["Allow"] = ", ".join(allowed)
        return resp

    paths: dict[str, list[str]] = {}
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        if "path" in info and route.method != "*":
            paths.setdefault(info["path"], []).append(route.method)
    app[PATHS] = {p: sorted(set(m)) for p, m in paths.items()}
    app.router.add_route("*", "/{path:.*}", unrouted)

"""404 and 405: a request no route takes gets an error in the dialect that owns its path
(``routes.OWNERS``: the dialect of the path's prefix, or on a path several SDKs share, the one the
request's headers name; OpenAI's when none does), JSON like every other error, with the request id and
the overhead header, never aiohttp's plain text. ``parse_error`` does the same for a request aiohttp's
parser refuses (``gateway.runtime.internals.ParseErrors``): dialect from the path alone, as no header
could be read.

It is the last route of the table, matching every path and method, so that no middleware runs on the
requests the table does serve; routes added after it would never be reached (``install`` comes last
in ``web.app.create_app``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiohttp import web

from gateway.core.errors import GatewayError, HeaderFieldsTooLarge, MethodNotAllowed, NotFound, RequestError
from gateway.dialects.base import Dialect
from gateway.web.pipeline import OVERHEAD_HEADER, error_response, request_id


@dataclass(frozen=True, slots=True)
class Served:
    """The methods the routes serve on a path: by its exact path, or by a templated route's pattern
    (``/v1/responses/{id}``, ``/v1/models/{model_id}``), so that a wrong method there is a 405 too."""

    exact: dict[str, tuple[str, ...]]
    patterns: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]

    def methods(self, path: str) -> tuple[str, ...]:
        found = self.exact.get(path)
        if found is not None:
            return found
        return tuple(sorted({m for pattern, ms in self.patterns if pattern.fullmatch(path) for m in ms}))


SERVED = web.AppKey("unrouted_served", Served)


@dataclass(frozen=True, slots=True)
class Owners:
    """Whose envelope a path no route takes is answered in: the dialect of its longest prefix in
    ``prefixes`` (whole segments); on any other path, the dialect of the first of ``headers`` the
    request carries, else ``default``; either refined by its ``select`` on the headers alone."""

    prefixes: tuple[tuple[str, Dialect], ...]
    headers: tuple[tuple[str, Dialect], ...]
    default: Dialect

    def __post_init__(self) -> None:
        longest = tuple(sorted(self.prefixes, key=lambda p: -len(p[0])))
        object.__setattr__(self, "prefixes", longest)

    def of(self, path: str, headers: Mapping[str, str]) -> Dialect:
        return self._owner(path, headers).select({}, headers)

    def _owner(self, path: str, headers: Mapping[str, str]) -> Dialect:
        for prefix, dialect in self.prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                return dialect
        return self.named(headers)

    def named(self, headers: Mapping[str, str]) -> Dialect:
        """On a path several SDKs share: the dialect of the first of ``headers`` the request carries,
        else ``default`` (``web.models`` tells Anthropic's model list from OpenAI's by it, too)."""
        return next((d for name, d in self.headers if name in headers), self.default)


def parse_error(owners: Owners) -> Callable[[str | None, int, str], web.Response]:
    """``answer(path, status, message)`` for a request the HTTP parser refused (``path`` None: none
    could be read), in that path's dialect."""

    def answer(path: str | None, status: int, message: str) -> web.Response:
        err = HeaderFieldsTooLarge(message) if status == HeaderFieldsTooLarge.status else RequestError(message)
        resp = error_response(owners.of(path or "/", {}), err, request_id({}))
        resp.headers[OVERHEAD_HEADER] = "0.000"  # no step of the gateway's ran
        return resp

    return answer


def served(router: web.UrlDispatcher) -> Served:
    exact: dict[str, set[str]] = {}
    patterns: dict[re.Pattern[str], set[str]] = {}
    for route in router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        if route.method == "*":
            continue
        if "path" in info:
            exact.setdefault(info["path"], set()).add(route.method)
        elif isinstance(info.get("pattern"), re.Pattern):
            patterns.setdefault(info["pattern"], set()).add(route.method)
    return Served(
        {p: tuple(sorted(m)) for p, m in exact.items()}, tuple((p, tuple(sorted(m))) for p, m in patterns.items())
    )


def install(app: web.Application, owners: Owners) -> None:
    async def unrouted(request: web.Request) -> web.Response:
        allowed = app[SERVED].methods(request.path)
        err: GatewayError
        if allowed:
            err = MethodNotAllowed(f"{request.method} is not served on {request.path[:200]}: use {', '.join(allowed)}")
        else:
            err = NotFound(f"no such path: {request.method} {request.path[:200]}")
        resp = error_response(owners.of(request.path, request.headers), err, request_id(request.headers))
        resp.headers[OVERHEAD_HEADER] = "0.000"  # no step of the gateway's ran
        if allowed:
            resp.headers["Allow"] = ", ".join(allowed)
        return resp

    app[SERVED] = served(app.router)
    app.router.add_route("*", "/{path:.*}", unrouted)

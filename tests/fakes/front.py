"""A front for upstreams on real sockets that routes each path prefix to one of them and answers any
other path 404 as FastAPI does (``{"detail": "Not Found"}``): a vLLM replica that lacks a route."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web

HOP = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class Front:
    def __init__(self) -> None:
        self.url = ""
        self.missing: list[str] = []  # the paths it answered 404, in order


@asynccontextmanager
async def front(routes: Mapping[str, str]) -> AsyncIterator[Front]:
    """``routes``: path prefix → origin it goes to (the first that matches). Streams pass read by read."""
    session, me = aiohttp.ClientSession(auto_decompress=False), Front()

    async def forward(request: web.Request) -> web.StreamResponse:
        origin = next((o for p, o in routes.items() if request.path.startswith(p)), None)
        if origin is None:
            me.missing.append(request.path)
            return web.json_response({"detail": "Not Found"}, status=404)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with session.request(
            request.method, origin + request.path_qs, data=await request.read(), headers=headers
        ) as up:
            out = web.StreamResponse(status=up.status)
            out.headers.update({k: v for k, v in up.headers.items() if k.lower() not in HOP})
            await out.prepare(request)
            async for chunk in up.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    me.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield me
    finally:
        await runner.cleanup()
        await session.close()

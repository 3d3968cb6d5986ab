"""The yardstick: a bare aiohttp pass-through proxy (one pooled session, body relayed chunk by chunk).
Whatever the gateway costs beyond this is its own overhead."""

from __future__ import annotations

import argparse

import aiohttp
from aiohttp import web

HOP = {"host", "content-length", "transfer-encoding", "connection"}


def app(upstream: str) -> web.Application:
    key = web.AppKey("session", aiohttp.ClientSession)

    async def session(application: web.Application):  # type: ignore[no-untyped-def]
        application[key] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await application[key].close()

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with request.app[key].request(request.method, upstream + request.path, data=body, headers=headers) as up:
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "")})
            await resp.prepare(request)
            async for data in up.content.iter_any():
                await resp.write(data)
            await resp.write_eof()
            return resp

    application = web.Application()
    application.cleanup_ctx.append(session)
    application.router.add_route("*", "/{tail:.*}", proxy)
    return application


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True)
    a = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app(a.upstream), host="127.0.0.1", port=a.port, access_log=None, print=None)


if __name__ == "__main__":
    main()

"""The yardstick: a bare aiohttp pass-through proxy, the floor the gateway is compared against.

One pooled ``ClientSession``; every request is forwarded as it came (method, path and query, body, the
end-to-end headers), and the answer is relayed as it arrives, chunk by chunk, with its status and
end-to-end headers. No auth, no parsing, no translation, no metrics, no logs: whatever the gateway
costs beyond this is its own.

    python -m benchmarks.yardstick_proxy --port 9100 --upstream http://127.0.0.1:9000
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from gateway.web.listener import BACKLOG

# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones aiohttp sets itself.
HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
SESSION = web.AppKey("session", aiohttp.ClientSession)


def create_app(upstream: str) -> web.Application:
    upstream = upstream.rstrip("/")

    async def session(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
        app[SESSION] = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        yield
        await app[SESSION].close()

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        try:
            async with request.app[SESSION].request(
                request.method, upstream + request.path_qs, data=body, headers=headers, allow_redirects=False
            ) as up:
                resp = web.StreamResponse(status=up.status, reason=up.reason)
                for name, value in up.headers.items():
                    if name.lower() not in HOP:
                        resp.headers.add(name, value)
                if up.content_length is not None:
                    resp.content_length = up.content_length
                await resp.prepare(request)
                async for data in up.content.iter_any():
                    await resp.write(data)
                await resp.write_eof()
                return resp
        except aiohttp.ClientError as exc:
            return web.json_response({"error": {"message": f"upstream: {exc}", "type": "bad_gateway"}}, status=502)

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.cleanup_ctx.append(session)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:9000")
    p.add_argument("--no-uvloop", action="store_true")
    a = p.parse_args(argv)
    loop_factory: Any = None
    if not a.no_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            loop_factory = uvloop.new_event_loop
    web.run_app(
        create_app(a.upstream),
        host=a.host,
        port=a.port,
        access_log=None,
        print=None,
        backlog=BACKLOG,  # the gateway's: a burst of connects waits as long at either
        handle_signals=True,
        loop=loop_factory() if loop_factory else None,
    )


if __name__ == "__main__":
    main()

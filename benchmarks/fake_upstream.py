"""A fast fake OpenAI-compatible upstream for the benchmark: fixed answers, optional streaming with a
configurable time to first token and gap between chunks. Not faithful (tests have their own
stand-ins); only cheap, so the gateway's cost dominates what is measured."""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web

WHOLE = json.dumps(
    {
        "id": "cmpl-bench",
        "object": "text_completion",
        "created": 1700000000,
        "model": "tiny",
        "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "text": " hello from the fake upstream", "finish_reason": "length", "logprobs": None}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
    }
).encode()


def chunk(i: int, last: bool) -> bytes:
    body = {
        "id": "cmpl-bench",
        "object": "text_completion",
        "created": 1700000000,
        "model": "tiny",
        "choices": [{"index": 0, "text": f" w{i}", "finish_reason": "length" if last else None, "logprobs": None}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = (
    b'data: {"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"tiny","choices":[],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":64,"total_tokens":69}}\n\n'
)


def app(chunks: int, ttft: float, gap: float) -> web.Application:
    frames = [chunk(i, i == chunks - 1) for i in range(chunks)]

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if b'"stream":true' not in body.replace(b" ", b""):
            return web.Response(body=WHOLE, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if ttft:
            await asyncio.sleep(ttft)
        if gap:
            for frame in frames:
                await resp.write(frame)
                await asyncio.sleep(gap)
        else:
            await resp.write(b"".join(frames))
        await resp.write(USAGE + b"data: [DONE]\n\n")
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    application = web.Application()
    application.router.add_post("/v1/completions", completions)
    application.router.add_post("/v1/chat/completions", completions)
    application.router.add_get("/v1/models", models)
    return application


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--chunks", type=int, default=64)
    p.add_argument("--ttft", type=float, default=0.0)
    p.add_argument("--gap", type=float, default=0.0)
    a = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app(a.chunks, a.ttft, a.gap), host="127.0.0.1", port=a.port, access_log=None, print=None)


if __name__ == "__main__":
    main()

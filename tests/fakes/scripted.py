"""A scripted OpenAI-compatible upstream for agent-shaped traffic: chat answers that call tools, and
embeddings. Stateless rules, so it serves a gateway in process or as a subprocess
(``python -m tests.fakes.scripted`` prints ``READY <url>``):

* the last message is a tool's output → the text ``the tool said: <output>``;
* the last user message holds ``[[tool:NAME]]`` → one call of the tool NAME with ``{"city": "Paris"}``;
* the last user message holds ``[[count]]`` → ``messages: N``, the number of messages it was sent;
* otherwise → ``echo: <the last user text>``, cut at ``max_tokens`` words (finish ``length``).

Streams send a word per chunk, a tool call in three (name, then its arguments in two halves), then
usage when asked for. ``/v1/embeddings`` answers a deterministic vector per input (8 numbers, or
``dimensions``), ``usage.prompt_tokens`` one per word or token id. Every request's body is kept in
``app[REQUESTS]``. Imports nothing of the gateway's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from typing import Any

from aiohttp import web

JSON = Any
REQUESTS = web.AppKey("requests", list)
ARGUMENTS = '{"city": "Paris"}'


def _text(content: JSON) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def plan(body: dict[str, JSON]) -> tuple[list[str], dict[str, str] | None, str]:
    """The answer's words, or a tool call (name, arguments), and the finish reason."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        words = f"the tool said: {_text(last.get('content'))}".split(" ")
        return _cut(words, body)
    text = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    if "[[count]]" in text:
        return _cut(["messages:", str(len(messages))], body)
    if "[[tool:" in text:
        name = text.split("[[tool:", 1)[1].split("]]", 1)[0]
        return [], {"name": name, "arguments": ARGUMENTS}, "tool_calls"
    return _cut(f"echo: {text}".split(" "), body)


def _cut(words: list[str], body: dict[str, JSON]) -> tuple[list[str], None, str]:
    most = body.get("max_tokens") or body.get("max_completion_tokens")
    if most is not None and len(words) > most:
        return words[:most], None, "length"
    return words, None, "stop"


def _usage(body: dict[str, JSON], out: int) -> dict[str, int]:
    prompt = sum(len(_text(m.get("content")).split()) + 1 for m in body.get("messages") or [])
    return {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}


def _call(tool: dict[str, str], arguments: str | None) -> dict[str, JSON]:
    call: dict[str, JSON] = {"index": 0, "id": "call_scripted", "type": "function"}
    call["function"] = {"name": tool["name"], "arguments": tool["arguments"] if arguments is None else arguments}
    return call


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[REQUESTS].append(body)
    words, tool, finish = plan(body)
    texts = [w if i == 0 else " " + w for i, w in enumerate(words)]
    head = {"id": "chatcmpl-scripted", "created": 1, "model": body.get("model", "")}
    if not body.get("stream"):
        message: dict[str, JSON] = {"role": "assistant", "content": "".join(texts) or None}
        if tool is not None:
            message["tool_calls"] = [{k: v for k, v in _call(tool, None).items() if k != "index"}]
        choice = {"index": 0, "message": message, "finish_reason": finish}
        out = {**head, "object": "chat.completion", "choices": [choice], "usage": _usage(body, len(words) or 1)}
        return web.json_response(out)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)

    async def send(delta: dict[str, JSON], reason: str | None = None) -> None:
        chunk = {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
        chunk["choices"][0]["finish_reason"] = reason
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    await send({"role": "assistant", "content": ""})
    for text in texts:
        await send({"content": text})
    if tool is not None:
        half = len(tool["arguments"]) // 2
        first = _call(tool, "")
        await send({"tool_calls": [first]})
        for part in (tool["arguments"][:half], tool["arguments"][half:]):
            await send({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
    await send({}, finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {**head, "object": "chat.completion.chunk", "choices": [], "usage": _usage(body, len(words) or 1)}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def vector(item: JSON, size: int) -> list[float]:
    seed = hashlib.sha256(json.dumps(item).encode()).digest()
    return [round((seed[i % len(seed)] - 128) / 128, 6) for i in range(size)]


async def embeddings(request: web.Request) -> web.Response:
    body = await request.json()
    request.app[REQUESTS].append(body)
    raw = body["input"]
    items = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else raw
    size = body.get("dimensions") or 8
    data = [{"object": "embedding", "index": i, "embedding": vector(x, size)} for i, x in enumerate(items)]
    tokens = sum(len(x.split()) if isinstance(x, str) else len(x) for x in items)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return web.json_response({"object": "list", "data": data, "model": body.get("model"), "usage": usage})


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})


def create_app() -> web.Application:
    app = web.Application()
    app[REQUESTS] = []
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/v1/models", models)
    return app


async def main(port: int) -> None:
    runner = web.AppRunner(create_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"READY http://127.0.0.1:{bound}/v1", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))

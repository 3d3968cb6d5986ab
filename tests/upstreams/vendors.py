"""Local stand-ins for each upstream vendor, following ``shared/dialects.md`` on the wire: OpenAI
(``[DONE]``, usage chunk), Friendli current (``token`` per chunk, ``seed``/``tokens`` per choice, no
``created`` in the body) and 2024 (``token_sampled``/``complete``), SGP (``x-api-key``, no ``[DONE]``,
FastAPI errors, chat-style logprobs on ``/v4/beta``), OctoAI (``system_fingerprint``, usage on the last
content chunk).

The "model" is deterministic: the answer's words depend only on the prompt, so streaming and
non-streaming answers can be compared. Faults are asked for by a marker in the prompt:
``[[status=500]]``, ``[[status=429]]``, ``[[reset]]`` (connection dropped before headers), ``[[cut]]``
(stream dropped after two chunks), ``[[hang=S]]`` (no headers for S seconds), ``[[stall=S]]`` (S
seconds between chunks), ``[[burst]]`` (the whole stream in one write, as a busy upstream's reads
arrive). ``fail_status`` makes every request fail (a dead target for fallbacks).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

JSON = Any
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
NATURAL = 6
MARK = re.compile(r"\[\[(\w+)(?:=([\d.]+))?\]\]")
KINDS = ("openai", "friendli", "friendli2024", "sgp", "sgp-v4", "octoai")


@dataclass
class Vendor:
    kind: str
    api_key: str = "upstream-key"
    fail_status: int | None = None
    faults: str = ""  # markers applied to every request, e.g. "[[reset]]"
    requests: list[dict[str, JSON]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    disconnects: int = 0
    sent: list[bytes] = field(default_factory=list)  # the last stream's data lines, as written


def prompt_text(body: dict[str, JSON]) -> str:
    if "messages" in body:
        return " ".join(str(m.get("content") or "") for m in body["messages"])
    p = body.get("prompt", body.get("tokens"))
    return json.dumps(p) if not isinstance(p, str) else p


def generate(text: str, max_tokens: int | None, index: int = 0) -> tuple[list[str], str]:
    start = (zlib.crc32(text.encode()) + index) % len(WORDS)
    words = [" " + WORDS[(start + i) % len(WORDS)] for i in range(NATURAL)]
    if max_tokens is not None and max_tokens < NATURAL:
        return words[:max_tokens], "length"
    return words, "stop"


def token_id(word: str) -> int:
    return 100 + WORDS.index(word.strip())


class Server:
    """One vendor's API on a real socket."""

    def __init__(self, vendor: Vendor) -> None:
        self.v = vendor
        self.app = web.Application()
        for path in self._paths():
            self.app.router.add_post(path, self.handle)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/v5/models", self.models)
        if vendor.kind == "openai":
            self.app.on_response_prepare.append(self._cloudflare_cookies)
        self.runner: web.AppRunner | None = None
        self.url = ""

    def _paths(self) -> list[str]:
        kind = self.v.kind
        if kind.startswith("sgp"):
            prefix = "/v4/beta" if kind == "sgp-v4" else "/v5"
            return [prefix + "/completions", prefix + "/chat/completions"]
        return ["/v1/completions", "/v1/chat/completions"]

    async def start(self) -> str:
        self.runner = web.AppRunner(self.app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        root = f"http://127.0.0.1:{port}"
        self.url = root + "/v1" if self.v.kind == "openai" else root
        return self.url

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    @staticmethod
    async def _cloudflare_cookies(request: web.Request, response: web.StreamResponse) -> None:
        # OpenAI's API sits behind Cloudflare, which sets these on every answer (per-client state:
        # a gateway must not hand one team's cookies to the next team's requests)
        # (as headers: this hook runs after aiohttp has turned ``response.cookies`` into headers)
        response.headers.add("Set-Cookie", "__cf_bm=bm; Path=/; HttpOnly")
        response.headers.add("Set-Cookie", "_cfuvid=uvid; Path=/; HttpOnly")

    # --- errors in each vendor's envelope ----------------------------------------------------------

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        kind = self.v.kind
        if kind.startswith("sgp"):
            body: JSON = {"detail": message}
        elif kind == "octoai":
            body = {"object": "error", "type": "error", "message": message, "code": None, "param": None}
        elif kind.startswith("friendli"):
            body = {"message": message}
        else:
            body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
        return web.json_response(body, status=status, headers=headers)

    def authorized(self, request: web.Request) -> bool:
        if not self.v.api_key:
            return True
        if self.v.kind.startswith("sgp"):
            return request.headers.get("x-api-key") == self.v.api_key
        return request.headers.get("Authorization") == f"Bearer {self.v.api_key}"

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "up-model", "object": "model"}]})

    # --- requests ----------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.v.requests.append(body)
        self.v.headers.append(dict(request.headers))
        if not self.authorized(request):
            return self.error(401, "bad upstream key")
        if self.v.fail_status is not None:
            return self.error(self.v.fail_status, "target is down")
        text = prompt_text(body)
        marks = {m.group(1): m.group(2) for m in MARK.finditer(text + self.v.faults)}
        if "hang" in marks:
            await asyncio.sleep(float(marks["hang"] or 5))
        if "reset" in marks:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if "status" in marks:
            status = int(float(marks["status"] or 500))
            return self.error(status, f"injected {status}", {"Retry-After": "1"} if status == 429 else None)
        if self.v.kind.startswith("friendli") and isinstance(body.get("stop"), str):
            return self.error(422, "stop must be a list")
        chat = request.path.endswith("chat/completions")
        n = int(body.get("n") or 1)
        outs = [generate(text, body.get("max_tokens"), i) for i in range(n)]
        if body.get("stream"):
            return await self.stream(request, body, outs, chat, marks)
        return web.json_response(self.whole(body, outs, chat))

    def usage(self, body: dict[str, JSON], outs: list[tuple[list[str], str]]) -> dict[str, int]:
        prompt = len(prompt_text(body).split())
        completion = sum(len(w) for w, _ in outs)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def whole(self, body: dict[str, JSON], outs: list[tuple[list[str], str]], chat: bool) -> JSON:
        kind = self.v.kind
        choices = []
        for i, (words, reason) in enumerate(outs):
            c: dict[str, JSON] = {"index": i}
            if chat:
                c["message"] = {"role": "assistant", "content": "".join(words)}
            else:
                c["text"] = "".join(words)
            if kind != "friendli2024":
                c["finish_reason"] = reason
                c["logprobs"] = None
            if kind.startswith("friendli"):
                seed = body.get("seed")
                c["seed"] = (seed[i] if isinstance(seed, list) else seed) if seed is not None else 7
                c["tokens"] = [token_id(w) for w in words]
            choices.append(c)
        out: dict[str, JSON] = {"choices": choices, "usage": self.usage(body, outs)}
        if kind != "friendli2024":
            out |= {"id": "up-1", "object": "chat.completion" if chat else "text_completion", "model": body["model"]}
        if not kind.startswith("friendli"):
            out["created"] = int(time.time())
        if kind == "octoai":
            out["system_fingerprint"] = "fp_octo"
        return out

    async def stream(
        self,
        request: web.Request,
        body: dict[str, JSON],
        outs: list[tuple[list[str], str]],
        chat: bool,
        marks: dict[str, str | None],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        stall = float(marks.get("stall") or 0)
        sent = 0
        self.v.sent = []
        try:
            for chunk in self.chunks(body, outs, chat):
                if "cut" in marks and sent == 2:
                    assert request.transport is not None
                    request.transport.close()
                    return resp
                if stall and sent:
                    await asyncio.sleep(stall)
                self.v.sent.append(self.dumps(chunk))
                if "burst" not in marks:
                    await resp.write(b"data: " + self.v.sent[-1] + b"\n\n")
                sent += 1
            done = b"data: [DONE]\n\n" if self.v.kind in ("openai", "friendli", "friendli2024", "octoai") else b""
            if "burst" in marks:
                await resp.write(b"".join(b"data: " + line + b"\n\n" for line in self.v.sent) + done)
            elif done:
                await resp.write(done)
        except (ConnectionResetError, asyncio.CancelledError):
            self.v.disconnects += 1
            raise
        await resp.write_eof()
        return resp

    def dumps(self, chunk: JSON) -> bytes:
        # OpenAI and vLLM (pydantic) write compact JSON; the others are spaced, as json.dumps does.
        compact = self.v.kind in ("openai", "vllm")
        return json.dumps(chunk, separators=(",", ":") if compact else None).encode()

    def chunks(self, body: dict[str, JSON], outs: list[tuple[list[str], str]], chat: bool) -> list[JSON]:
        kind = self.v.kind
        usage = self.usage(body, outs)
        if kind == "friendli2024":
            lines: list[JSON] = [
                {"event": "token_sampled", "index": i, "text": w, "token": token_id(w)}
                for i, (words, _) in enumerate(outs)
                for w in words
            ]
            done = self.whole(body, outs, chat)
            return [*lines, {"event": "complete", **done}]
        head: dict[str, JSON] = {"id": "up-1", "object": "chat.completion.chunk" if chat else "text_completion"}
        head |= {"created": int(time.time()), "model": body["model"]}
        if kind == "octoai":
            head["system_fingerprint"] = "fp_octo"
        out: list[JSON] = []
        for i, (words, reason) in enumerate(outs):
            for j, w in enumerate(words):
                c: dict[str, JSON] = {"index": i, "finish_reason": None, "logprobs": None}
                c["delta" if chat else "text"] = {"content": w} if chat else w
                if chat and j == 0 and kind == "openai":
                    c["delta"] = {"role": "assistant", "content": w}  # OpenAI: the role, once per choice
                if kind == "friendli":
                    c["token"] = token_id(w)
                if kind == "octoai" and j == len(words) - 1:
                    c["finish_reason"] = reason  # usage is attached to this, the last content chunk
                out.append({**head, "choices": [c]})
            if kind != "octoai":
                end: dict[str, JSON] = {"index": i, "finish_reason": reason, "logprobs": None}
                end["delta" if chat else "text"] = {} if chat else ""
                out.append({**head, "choices": [end]})
        if kind == "octoai":
            out[-1]["usage"] = usage
        elif kind.startswith("sgp"):
            out[-1]["usage"] = usage  # SGP: usage read from the final chunk
        elif (body.get("stream_options") or {}).get("include_usage"):
            for chunk in out:  # OpenAI: "usage": null on every chunk but the last (dialects.md §1)
                chunk["usage"] = None
            out.append({**head, "choices": [], "usage": usage})
        return out


async def start(kind: str, **kwargs: Any) -> Server:
    server = Server(Vendor(kind, **kwargs))
    await server.start()
    return server


async def _serve(kind: str, port: int) -> None:
    server = Server(Vendor(kind, api_key=""))
    server.runner = web.AppRunner(server.app, handler_cancellation=True)
    await server.runner.setup()
    await web.TCPSite(server.runner, "127.0.0.1", port).start()
    print("READY", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    import sys

    asyncio.run(_serve(sys.argv[1], int(sys.argv[2])))

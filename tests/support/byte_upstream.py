"""A scripted vLLM stand-in whose tokens are bytes, to break a stream anywhere: the junction of a
resumed stream (``gateway/routing/resume.py``) where the text lags the token ids.

Its model: a token is one UTF-8 byte (id: the byte plus ``SPECIAL``, as a byte-level BPE's alphabet),
and the greedy answer to any prompt is ``ANSWER``'s bytes, from where the prompt's ids leave it (a
prompt that is a prompt seen before plus the answer's first k ids is answered from byte k). Its text
is vLLM's: a token whose bytes end inside a character releases nothing until the character is whole,
a byte that cannot start one is ``\\ufffd``, and while a ``stop`` string could still match, the last
characters are held back too. A continuation decodes its output afresh, without the prompt's dangling
bytes, and looks for stop strings in its own output alone, as vLLM does: fed a prompt that ends inside
a character, vLLM 0.32's text is not the unbroken run's either (tokenizers' ``DecodeStream`` primed
with it has written the prompt's own start). A prompt that ends on a whole character continues
exactly, as vLLM's does.

Routes: ``/tokenize`` (a completion's prompt with ``BOS``, a chat's through the template
``<|role|>content\\n`` and ``<|assistant|>``, or ``continue_final_message``), and streamed ``/v1/completions`` and
``/v1/chat/completions`` in vLLM's chunks (``return_token_ids``, the usage chunk). ``tokens_per_event``
merges tokens into one event, as a busy vLLM does. ``cut`` breaks the next stream after that many
bytes of its SSE body, anywhere, a frame's middle too: then a reset, or a stall (``stall``: silent and
open until the server closes, as a SIGSTOPped server's). ``events`` keeps the last stream's events.
Imports nothing of the gateway's."""

from __future__ import annotations

import asyncio
import codecs
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

SPECIAL, BOS = 3, 1  # ids below SPECIAL are special tokens; a completion's prompt starts with BOS
# ASCII, 2-, 3- and 4-byte characters, a byte no character starts with, a character cut off by ASCII
SEEN: list[list[int]] = []  # prompts answered from the start, by any server (replicas share a model)
ANSWER = "ok é € 🙂 ".encode() + b"\xff " + b"\xe2\x82" + "A ü!".encode()


def byte_ids(data: bytes) -> list[int]:
    return [b + SPECIAL for b in data]


def chat_ids(body: dict[str, Any]) -> list[int]:
    """The template's ids; ``continue_final_message`` leaves the last message open (vLLM cuts the
    prompt after its content)."""
    text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in body["messages"])
    if body.get("continue_final_message"):
        return byte_ids(text.removesuffix("\n").encode())
    return byte_ids((text + ("<|assistant|>" if body.get("add_generation_prompt", True) else "")).encode())


@dataclass(frozen=True, slots=True)
class Cut:
    at: int  # bytes of the SSE body written before the break
    stall: bool = False


class ByteUpstream:
    """The server; ``url`` is its ``/v1`` base once ``start``ed."""

    def __init__(self, tokens_per_event: int = 1) -> None:
        self.tokens_per_event = tokens_per_event
        self.cut: Cut | None = None
        self.events: list[bytes] = []
        self.bodies: list[dict[str, Any]] = []
        self.closed = asyncio.Event()
        self.url = ""
        app = web.Application()
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/v1/chat/completions", self._generate)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)

    async def start(self) -> ByteUpstream:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def close(self) -> None:
        self.closed.set()
        await self._runner.cleanup()

    def _prompt(self, body: dict[str, Any]) -> list[int]:
        if "messages" in body:
            return chat_ids(body)
        prompt = body["prompt"]
        return list(prompt) if isinstance(prompt, list) else [BOS, *byte_ids(prompt.encode())]

    async def _tokenize(self, request: web.Request) -> web.Response:
        ids = self._prompt(await request.json())
        self._start(ids)
        return web.json_response({"tokens": ids})

    def _start(self, ids: list[int]) -> int:
        """Where in ``ANSWER`` a prompt leaves off: after the answer's ids that follow a prompt seen."""
        answer = byte_ids(ANSWER)
        for seen in SEEN:
            k = len(ids) - len(seen)
            if 0 < k <= len(answer) and ids[: len(seen)] == seen and ids[len(seen) :] == answer[:k]:
                return k
        SEEN.append(ids)
        return 0

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        start = self._start(self._prompt(body))
        out = ANSWER[start : start + body["max_tokens"]]
        self.events = _events(body, self._prompt(body), out, self.tokens_per_event)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        cut, self.cut, written = self.cut, None, 0
        for event in self.events:
            if cut is not None and written + len(event) > cut.at:
                await resp.write(event[: cut.at - written])
                if cut.stall:
                    await self.closed.wait()
                assert request.transport is not None
                request.transport.abort()
                return resp
            await resp.write(event)
            written += len(event)
        await resp.write_eof()
        return resp


def _events(body: dict[str, Any], prompt: list[int], out: bytes, per_event: int) -> list[bytes]:
    """The stream's SSE events: one a ``per_event`` tokens, their text as vLLM releases it."""
    chat, ids = "messages" in body, bool(body.get("return_token_ids"))
    head: dict[str, Any] = {"id": "cmpl-b", "object": "chat.completion.chunk" if chat else "text_completion"}
    head |= {"created": 0, "model": body["model"]}
    events = [_sse(head | {"choices": [_choice(chat, "", None) | {"delta": {"role": "assistant", "content": ""}}]})]
    events, done = events if chat else [], 0
    for tokens, text, finish in _released(body, out, per_event):
        choice = _choice(chat, text, finish) | {"token_ids": byte_ids(tokens) if ids else None}
        events.append(_sse(head | {"choices": [choice]}))
        done += len(tokens)
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": len(prompt), "completion_tokens": done, "total_tokens": len(prompt) + done}
        events.append(_sse(head | {"choices": [], "usage": usage}))
    return [*events, b"data: [DONE]\n\n"]


def _released(body: dict[str, Any], out: bytes, per_event: int) -> Iterator[tuple[bytes, str, str | None]]:
    """Each event's tokens, the text it releases and its finish: a token's text once its character is
    whole, the last ones held while a stop string could still match; a stop ends it at its token."""
    stops = body.get("stop") or []
    hold = max(map(len, stops)) - 1 if stops and not body.get("include_stop_str_in_output") else 0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text, released, tokens, finish = "", 0, b"", None
    for i in range(len(out)):
        tokens += out[i : i + 1]
        text += decoder.decode(out[i : i + 1], final=i == len(out) - 1)
        hit = min((text.find(stop) for stop in stops if stop in text), default=-1)  # this answer's text alone
        text = text if hit == -1 else text[:hit]
        finish = "stop" if hit != -1 else "length" if i == len(out) - 1 else None
        if finish or len(tokens) == per_event:
            end = len(text) if finish else max(released, len(text) - hold)
            yield tokens, text[released:end], finish
            released, tokens = end, b""
        if finish:
            return


def _choice(chat: bool, text: str, finish: str | None) -> dict[str, Any]:
    content = {"delta": {"content": text}} if chat else {"text": text, "logprobs": None}
    return {"index": 0, **content, "finish_reason": finish, "stop_reason": None}


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"

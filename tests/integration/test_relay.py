"""Same-format streams: an OpenAI (or Scale SGP) client's stream from an OpenAI-compatible upstream gets the
upstream's content chunks byte for byte (Friendli and OctoAI clients get them retouched into their own
style, in bytes), while the stream's identity, finishes, usage and errors still
go through the gateway's own codec (and are accounted for)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import http_writer, web, web_protocol
from aiohttp.test_utils import TestServer
from yarl import URL

from gateway.dialects.openai.chunks import ChunkDecoder
from tests.fakes import upstream as fake
from tests.integration.conftest import GatewayFactory, completions_server, config, target
from tests.integration.dialect_clients import BEARER, BY_NAME, frames
from tests.support import eventually

PROMPT = "Say something relayed"


async def post(gw: Any, path: str, body: dict[str, Any]) -> bytes:
    async with gw.session.post(gw.url + path, json=body, headers=BEARER) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.read()


async def completion_tokens(gw: Any) -> float:
    metrics = await (await gw.session.get(gw.url + "/metrics")).text()
    series = 'gateway_tokens_total{kind="completion",model="m",team="team1"} '
    return sum(float(line[len(series) :]) for line in metrics.splitlines() if line.startswith(series))


def relayed(server: fake.Upstream, raw: bytes, usage: bool = True) -> list[bool]:
    """Per upstream chunk: did it reach the client as the upstream wrote it (less the "usage": null
    a client that asked for no usage does not get)?"""
    lines = server.sent if usage else [line.replace(b',"usage":null', b"") for line in server.sent]
    return [b"data: " + line + b"\n\n" in raw for line in lines]


# chunk by chunk, and the whole stream in one write (one network read: its content chunks go out as one run)
PROMPTS = pytest.mark.parametrize("prompt", [PROMPT, PROMPT + " [[fault:burst]]"], ids=["chunked", "burst"])


@PROMPTS
async def test_content_chunks_pass_unchanged_and_usage_is_settled(
    gateway: GatewayFactory, upstream: Any, prompt: str
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    before = await completion_tokens(gw)
    answer = await gw.send(BY_NAME["openai"], "m", prompt, True)
    assert answer.status == 200
    # first chunk (identity), content chunks, finish chunk, usage chunk
    assert relayed(server, answer.raw) == [False, True, True, True, False, False]
    assert answer.text == fake.expected(prompt, 4) and answer.finish == "length"
    assert answer.usage["completion_tokens"] == 4 and answer.done
    assert await completion_tokens(gw) == before + 4  # accounted from the usage chunk


@PROMPTS
async def test_usage_nulls_are_dropped_when_usage_was_not_asked_for(
    gateway: GatewayFactory, upstream: Any, prompt: str
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    raw = await post(gw, "/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 4, "stream": True})
    # the gateway still asked for usage (to settle limits); the client did not, and sees none
    assert server.requests[-1].body["stream_options"] == {"include_usage": True}
    assert b'"usage"' in b"".join(server.sent) and b'"usage"' not in raw
    assert relayed(server, raw, usage=False) == [False, True, True, True, False, False]
    chunks = [json.loads(f) for f in frames(raw)[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == fake.expected(prompt, 4)
    assert frames(raw)[-1] == "[DONE]"


@PROMPTS
async def test_chat_relay_keeps_one_role_per_choice(gateway: GatewayFactory, upstream: Any, prompt: str) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 3, "n": 2, "stream": True}
    raw = await post(gw, "/v1/chat/completions", body)
    assert any(relayed(server, raw, usage=False))
    chunks = [json.loads(f) for f in frames(raw)[:-1]]
    roles = [(c["choices"][0]["index"], c["choices"][0]["delta"].get("role")) for c in chunks]
    assert sorted(i for i, role in roles if role) == [0, 1]  # one each: the gateway's, then the upstream's
    for i in (0, 1):
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"][0]["index"] == i)
        assert text == fake.expected(prompt, 3, i)
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]]
    assert finishes == ["length", "length"]


async def test_logprobs_streams_are_re_encoded(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    body = {"model": "m", "prompt": PROMPT, "max_tokens": 4, "stream": True, "logprobs": 1}
    raw = await post(gw, "/v1/completions", body)
    assert not any(relayed(server, raw, usage=False))


async def test_scale_clients_take_openai_chunks_too(gateway: GatewayFactory, upstream: Any) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    for name in ("sgp", "sgp5"):
        answer = await gw.send(BY_NAME[name], "m", PROMPT, True)
        assert answer.status == 200 and relayed(server, answer.raw)[1:4] == [True, True, True], name
        assert answer.text == fake.expected(PROMPT, 4) and not answer.done  # still no [DONE]
        assert answer.usage["completion_tokens"] == 4


def octoai_style(line: bytes) -> bytes:
    # OctoAI's chunks need a fingerprint (octoai drops chunks without one) and carry usage only last
    return b'{"system_fingerprint":"fp_llm_gateway",' + line[1:].replace(b',"usage":null', b"")


@PROMPTS
async def test_friendli_and_octoai_clients_take_openai_chunks_retouched(
    gateway: GatewayFactory, upstream: Any, prompt: str
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    words = fake.expected(prompt, 4)
    answer = await gw.send(BY_NAME["friendli"], "m", prompt, True)
    # OpenAI's content chunks less a fingerprint (it sends none here) are Friendli's, less a token
    assert answer.status == 200 and relayed(server, answer.raw) == [False, True, True, True, False, False]
    assert answer.text == words and answer.usage["completion_tokens"] == 4
    answer = await gw.send(BY_NAME["octoai"], "m", prompt, True)
    sent = [b"data: " + octoai_style(line) + b"\n\n" in answer.raw for line in server.sent]
    assert answer.status == 200 and sent == [False, True, True, True, False, False]
    assert answer.text == words and answer.usage["completion_tokens"] == 4
    last = json.loads(frames(answer.raw)[-2])  # usage rides on the last chunk, the finish
    assert last["choices"][0]["finish_reason"] == "length" and last["usage"]["completion_tokens"] == 4
    # friendli-client's 2024 completion stream is lines of its own, never OpenAI's chunks
    answer = await gw.send(BY_NAME["friendli2024"], "m", prompt, True)
    assert answer.status == 200 and not any(relayed(server, answer.raw))
    assert answer.text == fake.expected(prompt, 4, seed=server.requests[-1].body.get("seed"))


async def test_an_in_band_error_after_relayed_chunks_ends_the_stream_in_dialect(
    gateway: GatewayFactory, upstream: Any
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    answer = await gw.send(BY_NAME["openai"], "m", "x [[fault:reset_after=2]]", True)
    assert answer.status == 200
    assert relayed(server, answer.raw)[1]  # the second chunk went out as it came
    last = json.loads(frames(answer.raw)[-1])
    assert last["error"]["code"] == "upstream_failed"


def record_sends(monkeypatch: pytest.MonkeyPatch, port: int) -> list[bytes]:
    """What the gateway's server side (listening on ``port``) hands its transport, one item per send
    (the upstream stand-in's answers and the gateway's requests to it use the same writer class)."""
    sends: list[bytes] = []
    write, writelines = http_writer.StreamWriter._write, http_writer.StreamWriter._writelines

    def ours(writer: http_writer.StreamWriter) -> bool:
        transport = writer.transport
        return (
            isinstance(writer.protocol, web_protocol.RequestHandler)
            and transport is not None
            and transport.get_extra_info("sockname")[1] == port
        )

    def _write(self: http_writer.StreamWriter, chunk: Any) -> None:
        if ours(self):
            sends.append(bytes(chunk))
        write(self, chunk)

    def _writelines(self: http_writer.StreamWriter, chunks: Any) -> None:
        chunks = list(chunks)
        if ours(self):
            sends.append(b"".join(chunks))
        writelines(self, chunks)

    monkeypatch.setattr(http_writer.StreamWriter, "_write", _write)
    monkeypatch.setattr(http_writer.StreamWriter, "_writelines", _writelines)
    return sends


@PROMPTS
@pytest.mark.parametrize("busy", [False, True], ids=["alone", "busy"])
@pytest.mark.parametrize("ingress", ["openai", "friendli", "octoai", "sgp", "friendli2024"])
async def test_the_head_leaves_with_the_first_events_and_a_burst_in_one_send(
    gateway: GatewayFactory, upstream: Any, monkeypatch: pytest.MonkeyPatch, ingress: str, prompt: str, busy: bool
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    sends = record_sends(monkeypatch, URL(gw.url).port or 0)
    other = None
    if busy:  # another request in flight: its upstream holds its headers back for a while
        other = asyncio.create_task(gw.send(BY_NAME["openai"], "m", "x [[fault:hang_before=0.5]]", False))
        await eventually(lambda: server.requests, "the other request at the upstream")
    answer = await gw.send(BY_NAME[ingress], "m", prompt, True)
    drawn = server.requests[-1].body.get("seed")  # friendli2024's client draws a seed the answer follows
    assert answer.status == 200 and answer.text == fake.expected(prompt, 4, seed=drawn)
    sends = list(sends)  # this stream's (the other answers later)
    assert sends[0].startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in sends[0]
    assert b"data:" in sends[0].split(b"\r\n\r\n", 1)[1]  # not the head alone
    assert sends[-1].endswith(b"0\r\n\r\n")  # the chunked body's end
    if "[[fault:burst]]" in prompt and busy:  # the whole stream in one read, and in one send: every send
        # costs CPU the other requests wait for
        assert len(sends) == 1, sends
    elif "[[fault:burst]]" in prompt:  # alone: head and first event in one send, without waiting for the
        # work on the rest; the rest and the end in another
        assert len(sends) == 2, sends
        assert sends[0].count(b"data:") == 1 and b"0\r\n\r\n" not in sends[0]
    else:  # at most one send per upstream read, the first with the head (the stand-in writes [DONE] apart)
        assert len(sends) < len(server.sent) + 2, sends
    if other is not None:
        assert (await other).status == 200


FAILING = "[[fault:error_after=1,burst]]"  # one write: a content chunk, then vLLM's in-band error event


@pytest.mark.parametrize("busy", [False, True], ids=["alone", "busy"])
async def test_first_events_held_for_their_read_still_reach_the_client_when_it_fails(
    gateway: GatewayFactory, upstream: Any, busy: bool
) -> None:
    server = await upstream("openai")
    gw = await gateway(config([{"name": "m", "targets": [target(server, "openai")]}]))
    hang = {"model": "m", "prompt": "hang [[fault:hang_before=0.5]]", "max_tokens": 4}
    other = asyncio.create_task(post(gw, "/v1/completions", hang)) if busy else None
    if busy:
        await eventually(lambda: server.active, "the other request in flight")
    raw = await post(gw, "/v1/completions", {"model": "m", "prompt": f"p {FAILING}", "stream": True})
    events = [json.loads(f) for f in frames(raw) if f != "[DONE]"]
    assert "".join(e["choices"][0]["text"] for e in events if e.get("choices")) == fake.expected(f"p {FAILING}", 1)
    assert "injected stream error" in events[-1]["error"]["message"]
    if other is not None:
        assert fake.expected(hang["prompt"], 4).encode() in await other


PACED_TEXTS = [" one", " two", " three", '"four"', " five", " six"]


@pytest.fixture
async def paced_upstream() -> AsyncIterator[tuple[TestServer, list[asyncio.Event]]]:
    """A model server's stream, one token's event per write. With "paced" in the prompt it writes each
    content event only once the client has the one before (``seen``): every upstream read holds one
    event; else the whole stream in one write."""
    seen = [asyncio.Event() for _ in PACED_TEXTS]

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        head = {"id": "c", "object": "text_completion", "created": 1, "model": "m", "system_fingerprint": "fp"}

        def event(choices: list[dict[str, Any]], usage: Any = None) -> bytes:
            data = {**head, "choices": choices, "usage": usage}
            return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

        def choice(text: str, finish: str | None = None) -> dict[str, Any]:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        events = [event([choice(t)]) for t in PACED_TEXTS]
        tail = event([choice("", "length")]) + event([], {"prompt_tokens": 2, "completion_tokens": 6})
        if "paced" not in body["prompt"]:
            await resp.write(b"".join(events) + tail + b"data: [DONE]\n\n")
        else:
            for data, shown in zip(events, seen, strict=True):
                await resp.write(data)
                await shown.wait()
            await resp.write(tail + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async with completions_server(completions) as server:
        yield server, seen


@pytest.mark.parametrize("ingress", ["openai", "octoai", "sgp"])
async def test_paced_tokens_go_out_as_read_and_as_the_same_stream_in_a_burst_would(
    gateway: GatewayFactory,
    paced_upstream: tuple[TestServer, list[asyncio.Event]],
    monkeypatch: pytest.MonkeyPatch,
    ingress: str,
) -> None:
    server, seen = paced_upstream
    url = str(server.make_url("/v1"))
    gw = await gateway(config([{"name": "m", "targets": [{"provider": "openai", "base_url": url, "model": "m"}]}]))
    tokens = []
    same_shape = ChunkDecoder.same_shape

    def counted(decoder: ChunkDecoder, buffer: bytes) -> bool:
        tokens.append(same := same_shape(decoder, buffer))
        return same

    monkeypatch.setattr(ChunkDecoder, "same_shape", counted)
    answers = []
    for prompt in ("paced", "a burst"):  # (the burst's client sets every ``seen``)
        path, headers, body = BY_NAME[ingress].request("m", prompt, True)
        async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
            assert resp.status == 200
            raw = b""
            while chunk := await resp.content.readany():
                raw += chunk
                for text, shown in zip(PACED_TEXTS, seen, strict=True):
                    if json.dumps(text)[1:-1].encode() in raw:
                        shown.set()
            answers.append(raw)
    assert all(s.is_set() for s in seen)
    # the stream's first chunk is decoded and the second, relayed alone, lends its shape to the third;
    # the quoted text takes the full check and lends none, the fifth lends it anew to the last
    assert tokens.count(True) == 2
    assert frames(answers[0]) == frames(answers[1])
    texts = [c["text"] for f in frames(answers[0]) if f != "[DONE]" for c in json.loads(f)["choices"]]
    assert "".join(texts) == "".join(PACED_TEXTS)

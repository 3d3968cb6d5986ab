"""The fake upstream keeps its promises: vLLM's shapes and checks, each vendor's wire, each fault, and
the benchmark's fast front end (its pacing, and the same answers as the OpenAI wire)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from tests.fakes.upstream import EOS_ID, NATURAL_LENGTH, STATE, create_app, expected, start, token_id, tokenize
from tests.fakes.upstream.fast import HttpProtocol, Settings
from tests.support import eventually

Client = TestClient[web.Request, web.Application]
JSON = dict[str, Any]
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"


@pytest.fixture
async def client(aiohttp_client: AiohttpClient) -> Client:
    return await aiohttp_client(create_app("vllm", models=("tiny", "other")))


def body_for(path: str, text: str, **fields: Any) -> JSON:
    if path.endswith("chat/completions"):
        return {"model": "tiny", "messages": [{"role": "user", "content": text}], **fields}
    return {"model": "tiny", "prompt": text, **fields}


def text_of(choice: JSON) -> str:
    return str(choice["message"]["content"] if "message" in choice else choice["text"])


async def post(client: Client, path: str, body: JSON, status: int = 200) -> JSON:
    resp = await client.post(path, json=body)
    assert resp.status == status, await resp.text()
    result: JSON = await resp.json()
    return result


async def events(client: Client, path: str, body: JSON, done: bool = True) -> list[JSON]:
    """The stream's JSON events, after checking the framing and the ``[DONE]`` terminator."""
    resp = await client.post(path, json=body | {"stream": True})
    assert resp.status == 200, await resp.text()
    blocks = (await resp.text()).removesuffix("\n\n").split("\n\n")
    assert all(b.startswith("data: ") for b in blocks)
    assert (blocks[-1] == "data: [DONE]") == done
    return [json.loads(b.removeprefix("data: ")) for b in blocks[:-1] if done or b] + (
        [] if done else [json.loads(blocks[-1].removeprefix("data: "))]
    )


def joined(chunks: list[JSON]) -> dict[int, str]:
    out: dict[int, str] = {}
    for c in chunks:
        for ch in c.get("choices", []):
            piece = ch["delta"].get("content", "") if "delta" in ch else ch["text"]
            out[ch["index"]] = out.get(ch["index"], "") + piece
    return out


# --- vLLM: shapes, lengths, stops, n -------------------------------------------------------------


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
async def test_vllm_whole_and_stream_agree_with_usage_chunk(client: Client, path: str) -> None:
    body = body_for(path, "tell me a story", max_tokens=5)
    whole = await post(client, path, body)
    assert whole["object"] == ("chat.completion" if path == CHAT else "text_completion")
    assert whole["choices"][0]["finish_reason"] == "length" and whole["choices"][0]["stop_reason"] is None
    assert text_of(whole["choices"][0]) == expected("tell me a story", 5)
    chunks = await events(client, path, body | {"stream_options": {"include_usage": True}})
    assert joined(chunks) == {0: text_of(whole["choices"][0])}
    *content, usage = chunks
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    if path == CHAT:  # vLLM: the role alone first, then one chunk per token
        assert content[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["finish_reason"] for c in content][-2:] == [None, "length"]


async def test_vllm_counts_eos_and_returns_token_ids(client: Client) -> None:
    result = await post(client, COMPLETIONS, body_for(COMPLETIONS, "echo me", echo=True, return_token_ids=True))
    choice = result["choices"][0]
    assert choice["text"].startswith("echo me ") and len(choice["text"].split()) == NATURAL_LENGTH + 2
    assert choice["prompt_token_ids"] == [token_id("echo"), token_id(" me")]
    assert choice["token_ids"][-1] == EOS_ID and choice["finish_reason"] == "stop"
    assert result["usage"] == {"prompt_tokens": 2, "completion_tokens": NATURAL_LENGTH + 1, "total_tokens": 11}
    resp = await client.post(COMPLETIONS, json=body_for(COMPLETIONS, "x"), headers={"X-Request-Id": "gw-1"})
    assert (await resp.json())["id"] == "cmpl-gw-1"


@pytest.mark.parametrize("include", [False, True])
async def test_vllm_stop_strings_and_token_ids(client: Client, include: bool) -> None:
    natural = text_of((await post(client, COMPLETIONS, body_for(COMPLETIONS, "stops")))["choices"][0])
    stop = natural.split()[4][:3]  # part of a word: vLLM matches text, not tokens
    cut = natural.index(stop) + (len(stop) if include else 0)
    body = body_for(COMPLETIONS, "stops", stop=["never-there", stop], include_stop_str_in_output=include)
    choice = (await post(client, COMPLETIONS, body))["choices"][0]
    assert choice["text"] == natural[:cut] and choice["stop_reason"] == stop
    assert joined(await events(client, COMPLETIONS, body)) == {0: natural[:cut]}
    ids = [token_id(t) for t in tokenize(natural)]
    by_id = await post(client, COMPLETIONS, body_for(COMPLETIONS, "stops", stop_token_ids=[ids[2]]))
    assert by_id["choices"][0]["stop_reason"] == ids[2] and by_id["choices"][0]["text"] == "".join(
        tokenize(natural)[:2]
    )


async def test_vllm_n_batches_and_seeds(client: Client) -> None:
    batch = await post(client, COMPLETIONS, {"model": "tiny", "prompt": ["one", "two words"], "n": 2, "seed": 7})
    assert [c["index"] for c in batch["choices"]] == [0, 1, 2, 3] and batch["usage"]["prompt_tokens"] == 3
    assert [c["text"] for c in batch["choices"]] == [
        expected(p, 16, i, 7) for p in ("one", "two words") for i in (0, 1)
    ]
    streamed = await events(client, COMPLETIONS, {"model": "tiny", "prompt": ["one", "two words"], "n": 2, "seed": 7})
    assert joined(streamed) == {c["index"]: c["text"] for c in batch["choices"]}
    greedy = [await post(client, COMPLETIONS, body_for(COMPLETIONS, "s", temperature=0, seed=s)) for s in (1, 2)]
    assert greedy[0]["choices"][0]["text"] == greedy[1]["choices"][0]["text"]


async def test_vllm_logprobs_shapes(client: Client) -> None:
    legacy = (await post(client, COMPLETIONS, body_for(COMPLETIONS, "lp", logprobs=3, max_tokens=4)))["choices"][0]
    lp = legacy["logprobs"]
    assert lp["tokens"] == tokenize(legacy["text"]) and [len(t) for t in lp["top_logprobs"]] == [3] * 4
    assert lp["text_offset"] == [0, *[sum(map(len, lp["tokens"][: i + 1])) for i in range(3)]]
    chat = await post(client, CHAT, body_for(CHAT, "lp", logprobs=True, top_logprobs=2, max_tokens=3))
    first = chat["choices"][0]["logprobs"]["content"][0]
    assert set(first) == {"token", "logprob", "bytes", "top_logprobs"} and len(first["top_logprobs"]) == 2


# --- vLLM: its checks and its words --------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "fields", "param"),
    [
        (COMPLETIONS, {"temperature": 3}, "temperature"),
        (COMPLETIONS, {"n": 2, "temperature": 0}, None),
        (COMPLETIONS, {"logprobs": 21}, "logprobs"),
        (COMPLETIONS, {"max_tokens": 5000}, "input_tokens"),
        (COMPLETIONS, {"stream_options": {"include_usage": True}}, "stream_options"),
        (COMPLETIONS, {"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
        (CHAT, {"top_logprobs": 2}, "top_logprobs"),
    ],
)
async def test_vllm_rejections(client: Client, path: str, fields: JSON, param: str | None) -> None:
    error = (await post(client, path, body_for(path, "x", **fields), status=400))["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400 and error["param"] == param


@pytest.mark.parametrize(
    ("parameters", "arguments"),  # the arguments' types
    [
        ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}, {"a": str}),  # JSON Schema's list
        ({"type": "object", "properties": {"a": {"type": {"x": 1}}}}, {"a": type(None)}),
        ({"type": "object", "properties": [{"a": 1}]}, {}),
        ([], {}),
    ],
)
async def test_any_tool_schema_gets_a_call(client: Client, parameters: Any, arguments: JSON) -> None:
    """The gateway passes a tool's schema on as given (the target judges it): the fake answers any,
    where it once crashed with a 500 the gateway reported as the target's failure."""
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    body = body_for(CHAT, "x", tools=[tool, {"type": "function", "function": []}], tool_choice="auto")
    (call,) = (await post(client, CHAT, body))["choices"][0]["message"]["tool_calls"]
    assert {k: type(v) for k, v in json.loads(call["function"]["arguments"]).items()} == arguments


@pytest.mark.parametrize("choice", [{"type": "text"}, {"type": "function", "name": 5}, {}])
async def test_openai_responses_refuses_a_tool_choice_without_a_name(
    aiohttp_client: AiohttpClient, choice: JSON
) -> None:
    """The gateway sends a Responses body to an ``openai`` target as it came: the fake judges it as
    OpenAI does (a 400 naming the field), where it once crashed with a 500."""
    client = await aiohttp_client(create_app("openai", models=("tiny",)))
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    body = {"model": "tiny", "input": "x", "tools": [tool], "tool_choice": choice}
    error = (await post(client, "/v1/responses", body, status=400))["error"]
    assert error["param"] == "tool_choice.name"


async def test_vllm_wording_unknown_models_and_ignored_fields(client: Client) -> None:
    error = (await post(client, COMPLETIONS, body_for(COMPLETIONS, "x", temperature=3), status=400))["error"]
    assert error["message"] == "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)"
    missing = body_for(COMPLETIONS, "x") | {"model": "nope", "temperature": 3}  # the model is looked up first
    assert (await post(client, COMPLETIONS, missing, status=404))["error"][
        "message"
    ] == "The model `nope` does not exist."
    await post(client, COMPLETIONS, body_for(COMPLETIONS, "x", guided_json={"type": "object"}))
    assert client.app[STATE].requests[-1].body["guided_json"] == {"type": "object"}  # ignored, but seen


async def test_vllm_side_routes(client: Client) -> None:
    assert [m["id"] for m in (await (await client.get("/v1/models")).json())["data"]] == ["tiny", "other"]
    tok = await post(client, "/tokenize", {"model": "tiny", "prompt": "hello big world"})
    assert tok["tokens"] == [token_id(t) for t in ["hello", " big", " world"]]
    assert (await post(client, "/detokenize", {"model": "tiny", "tokens": tok["tokens"]}))[
        "prompt"
    ] == "hello big world"
    assert 'vllm:num_requests_running{engine="0",model_name="tiny"} 0' in await (await client.get("/metrics")).text()


# --- the vendors' wires --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "friendli", "friendli2024", "sgp", "sgp-v4", "octoai"])
@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
async def test_each_vendor_wire(aiohttp_client: AiohttpClient, kind: str, chat: bool) -> None:
    client = await aiohttp_client(create_app(kind))
    prefix = {"sgp": "/v5", "sgp-v4": "/v4/beta"}.get(kind, "/v1")
    path = prefix + ("/chat/completions" if chat else "/completions")
    body = body_for(path, "hi", max_tokens=3, model="up-model", stream_options={"include_usage": True})
    whole = await post(client, path, {k: v for k, v in body.items() if k != "stream_options"})
    assert text_of(whole["choices"][0]) == expected("hi", 3)
    assert ("created" in whole) == (kind not in ("friendli", "friendli2024"))
    assert ("finish_reason" in whole["choices"][0]) == (kind != "friendli2024")
    if kind.startswith("friendli"):
        assert whole["choices"][0]["tokens"] == [token_id(t) for t in tokenize(expected("hi", 3))]
    chunks = await events(client, path, body, done=not kind.startswith("sgp"))
    last = chunks[-1]
    if kind == "friendli2024":
        assert last["event"] == "complete" and [c["event"] for c in chunks[:-1]] == ["token_sampled"] * 3
        assert "".join(c["text"] for c in chunks[:-1]) == expected("hi", 3)
        return
    assert joined(chunks) == {0: expected("hi", 3)}
    if kind in ("openai", "friendli"):  # a finish chunk of its own, then the usage chunk
        assert last["choices"] == [] and chunks[-2]["choices"][0]["finish_reason"] == "length"
        assert all(c["usage"] is None for c in chunks[:-1])
    else:  # SGP: usage on the final chunk; OctoAI: on the last content chunk, with the finish
        assert last["usage"]["completion_tokens"] == 3 and last["choices"][0]["finish_reason"] == "length"
    if kind == "octoai":
        assert all(c["system_fingerprint"] == "fp_octo" for c in chunks)


@pytest.mark.parametrize(
    ("kind", "envelope"),
    [("openai", {"error"}), ("friendli", {"message"}), ("sgp", {"detail"}), ("octoai", {"object", "message"})],
)
async def test_each_vendor_error_envelope_and_key(aiohttp_client: AiohttpClient, kind: str, envelope: set[str]) -> None:
    client = await aiohttp_client(create_app(kind, api_key="k"))
    path = ("/v5" if kind == "sgp" else "/v1") + "/completions"
    header = {"x-api-key": "k"} if kind == "sgp" else {"Authorization": "Bearer k"}
    assert (await client.post(path, json=body_for(path, "x"))).status == 401
    resp = await client.post(path, json=body_for(path, "x [[fault:status=503]]"), headers=header)
    assert resp.status == 503 and envelope <= set(await resp.json())


# --- faults --------------------------------------------------------------------------------------


async def test_fault_status_retry_after_and_once(client: Client) -> None:
    resp = await client.post(COMPLETIONS, json=body_for(COMPLETIONS, "x [[fault:status=429,retry_after=2]]"))
    assert resp.status == 429 and resp.headers["Retry-After"] == "2"
    once = body_for(COMPLETIONS, "x [[fault:once:status=503,id=a]]")
    await post(client, COMPLETIONS, once, status=503)
    await post(client, COMPLETIONS, once)
    assert (
        "explode"
        in (await post(client, COMPLETIONS, body_for(COMPLETIONS, "[[fault:explode]]"), status=500))["error"]["message"]
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_fault_resets(client: Client, stream: bool) -> None:
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post(COMPLETIONS, json=body_for(COMPLETIONS, "x [[fault:reset_before]]", stream=stream))
    resp = await client.post(CHAT, json=body_for(CHAT, "x [[fault:reset_after=3]]", stream=True))
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    assert len([s for s in client.app[STATE].sent if b'"content":"' in s and b'"role"' not in s]) == 3


async def test_fault_error_event_burst_and_gaps(client: Client) -> None:
    *tokens, error = await events(client, COMPLETIONS, body_for(COMPLETIONS, "x [[fault:error_after=2]]"))
    assert len(tokens) == 2 and error["error"]["type"] == "InternalServerError"
    began = time.monotonic()
    chunks = await events(client, COMPLETIONS, body_for(COMPLETIONS, "x [[fault:slow=0.05,burst]]", max_tokens=4))
    assert len(chunks) == 4 and time.monotonic() - began >= 4 * 0.05  # three gaps, one before [DONE]


async def test_a_client_hanging_up_is_counted(aiohttp_client: AiohttpClient) -> None:
    async with await start("vllm", models=("tiny",)) as upstream, aiohttp.ClientSession() as session:
        body = {"model": "tiny", "prompt": "x [[fault:hang_between=0.05]]", "stream": True, "ignore_eos": True}
        async with session.post(upstream.url + "/completions", json=body) as resp:
            await resp.content.readline()
            assert upstream.active == 1
        await eventually(lambda: upstream.cancelled == 1 and upstream.active == 0, "the hang-up counted")


# --- running it: the subprocess and the fast front end --------------------------------------------


async def test_runs_as_a_subprocess() -> None:
    cmd = [sys.executable, "-m", "tests.fakes.upstream", "--port", "0", "--model", "a", "--model", "b"]
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().split()[1]
        async with aiohttp.ClientSession() as session, session.get(url + "/models") as resp:
            assert [m["id"] for m in (await resp.json())["data"]] == ["a", "b"]
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0


@pytest.fixture
async def fast() -> AsyncIterator[str]:
    server = await asyncio.get_running_loop().create_server(lambda: HttpProtocol(Settings(4, 0.0, 0.0)), "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


async def test_fast_front_end_answers_as_the_openai_wire(fast: str, aiohttp_client: AiohttpClient) -> None:
    slow = await aiohttp_client(create_app("openai"))
    body = {"model": "tiny", "prompt": "Say hello", "max_tokens": 4, "ignore_eos": True, "stream": True}
    async with aiohttp.ClientSession() as session, session.post(fast + "/v1/completions", json=body) as resp:
        mine = joined([json.loads(line[6:]) for line in (await resp.text()).split("\n\n") if line[6:7] == "{"])
    assert mine == joined(await events(slow, COMPLETIONS, body)) == {0: expected("Say hello", 4)}


async def test_fast_pacing_is_set_and_given_back(fast: str) -> None:
    body = {"model": "tiny", "prompt": "hi", "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(fast + "/bench/pacing", json={"ttft_ms": 0, "gap_ms": 20}) as resp:
            assert await resp.json() == {"ttft_ms": 0.0, "gap_ms": 0.0}
        began = time.perf_counter()
        async with session.post(fast + "/v1/completions", json=body) as resp:
            parts = [chunk async for chunk in resp.content.iter_any()]
        assert len(parts) >= 4 and time.perf_counter() - began >= 0.06  # gaps of 20 ms between 5 frames
        async with session.post(fast + "/bench/pacing", json={"ttft_ms": 0, "gap_ms": 0}) as resp:
            assert await resp.json() == {"ttft_ms": 0.0, "gap_ms": 20.0}
        for bad in ({"gap_ms": "x"}, {"gap_ms": -1}, [1]):
            async with session.post(fast + "/bench/pacing", json=bad) as resp:
                assert resp.status == 400


async def test_anthropic_wire_requires_its_version_header(aiohttp_client: AiohttpClient) -> None:
    """As Anthropic's API does: a Messages request without ``anthropic-version`` is refused."""
    client = await aiohttp_client(create_app("anthropic", models=("tiny",)))
    body = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post("/v1/messages", json=body)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error == {"type": "invalid_request_error", "message": "anthropic-version: header is required"}
    resp = await client.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert resp.status == 200, await resp.text()
    count = {"model": "tiny", "messages": body["messages"]}
    resp = await client.post("/v1/messages/count_tokens", json=count)
    assert resp.status == 400 and (await resp.json())["error"]["message"] == "anthropic-version: header is required"
    resp = await client.post("/v1/messages/count_tokens", json=count, headers={"anthropic-version": "2023-06-01"})
    assert resp.status == 200, await resp.text()

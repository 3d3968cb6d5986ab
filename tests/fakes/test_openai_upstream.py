"""The fake OpenAI/vLLM upstream keeps its promises: vLLM's wire shapes, its validation, and each fault."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from tests.fakes.openai_upstream import (
    EOS_ID,
    NATURAL_LENGTH,
    STATE,
    VOCAB,
    UpstreamState,
    create_app,
    start_upstream,
    token_id,
    tokenize,
)

Client = TestClient[web.Request, web.Application]
JSON = dict[str, Any]
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"


@pytest.fixture
async def client(aiohttp_client: AiohttpClient) -> Client:
    return await aiohttp_client(create_app(models=("tiny", "other")))


def state(client: Client) -> UpstreamState:
    return client.app[STATE]


def body_for(path: str, text: str, **fields: Any) -> JSON:
    if path == CHAT:
        return {"model": "tiny", "messages": [{"role": "user", "content": text}], **fields}
    return {"model": "tiny", "prompt": text, **fields}


def text_of(path: str, choice: JSON) -> str:
    return str(choice["message"]["content"] if path == CHAT else choice["text"])


def delta_text(path: str, choice: JSON) -> str:
    return str(choice["delta"].get("content", "") if path == CHAT else choice["text"])


async def post(client: Client, path: str, body: JSON, status: int = 200) -> JSON:
    resp = await client.post(path, json=body)
    assert resp.status == status, await resp.text()
    result: JSON = await resp.json()
    return result


async def events(client: Client, path: str, body: JSON) -> list[JSON]:
    """The stream's JSON events, after checking the framing and the ``[DONE]`` terminator."""
    resp = await client.post(path, json=body | {"stream": True})
    assert resp.status == 200, await resp.text()
    assert resp.content_type == "text/event-stream"
    raw = await resp.text()
    assert raw.endswith("\n\n")
    blocks = raw.removesuffix("\n\n").split("\n\n")
    assert all(b.startswith("data: ") for b in blocks)
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(b.removeprefix("data: ")) for b in blocks[:-1]]


def joined(path: str, chunks: list[JSON]) -> dict[int, str]:
    out: dict[int, str] = {}
    for c in chunks:
        for choice in c["choices"]:
            out[choice["index"]] = out.get(choice["index"], "") + delta_text(path, choice)
    return out


async def eventually(check: Callable[[], bool], within: float = 2.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


# --- shapes --------------------------------------------------------------------------------------


async def test_health_models_tokenize_detokenize(client: Client) -> None:
    assert (await client.get("/health")).status == 200
    models = await (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["tiny", "other"]
    assert {"id", "object", "created", "owned_by"} <= set(models["data"][0])
    assert models["data"][0]["object"] == "model"
    tok = await post(client, "/tokenize", {"model": "tiny", "prompt": "hello big world"})
    assert tok["count"] == 3
    assert tok["tokens"] == [token_id(t) for t in ["hello", " big", " world"]]
    assert tok["max_model_len"] > 0
    detok = await post(client, "/detokenize", {"model": "tiny", "tokens": tok["tokens"]})
    assert detok["prompt"] == "hello big world"
    await post(client, "/tokenize", {"model": "nope", "prompt": "x"}, status=404)


async def test_completion_is_deterministic_and_shaped_like_vllm(client: Client) -> None:
    body = body_for(COMPLETIONS, "Say something")
    first, second = await post(client, COMPLETIONS, body), await post(client, COMPLETIONS, body)
    assert first["choices"][0]["text"] == second["choices"][0]["text"]
    assert first["id"].startswith("cmpl-") and first["object"] == "text_completion"
    assert first["model"] == "tiny" and isinstance(first["created"], int)
    assert first["system_fingerprint"] is None
    choice = first["choices"][0]
    assert choice["index"] == 0 and choice["logprobs"] is None
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] is None
    words = choice["text"].split()
    assert len(words) == NATURAL_LENGTH and set(words) <= set(VOCAB)
    # The EOS token counts as a completion token, as in vLLM.
    assert first["usage"] == {"prompt_tokens": 2, "completion_tokens": NATURAL_LENGTH + 1, "total_tokens": 11}


async def test_chat_completion_shape(client: Client) -> None:
    result = await post(client, CHAT, body_for(CHAT, "hi"))
    assert result["id"].startswith("chatcmpl-") and result["object"] == "chat.completion"
    message = result["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"].split()) == NATURAL_LENGTH
    assert message["tool_calls"] == []
    assert result["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
async def test_stream_equals_non_stream_with_usage_chunk(client: Client, path: str) -> None:
    body = body_for(path, "tell me a story", max_tokens=5)
    whole = await post(client, path, body)
    chunks = await events(client, path, body | {"stream_options": {"include_usage": True}})
    assert joined(path, chunks) == {0: text_of(path, whole["choices"][0])}
    *content, usage = chunks
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    assert all(c["usage"] is None for c in content)
    assert [c["choices"][0]["finish_reason"] for c in content][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    plain = await events(client, path, body)
    assert all("usage" not in c and c["choices"] for c in plain)


async def test_continuous_usage_stats(client: Client) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks = await events(client, COMPLETIONS, body_for(COMPLETIONS, "x", max_tokens=3, stream_options=options))
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3]
    assert chunks[-1]["choices"] == []


async def test_chat_n_streams_every_choice(client: Client) -> None:
    body = body_for(CHAT, "pick", n=3, seed=5, max_tokens=4)
    whole = await post(client, CHAT, body)
    chunks = await events(client, CHAT, body)
    assert [c["choices"][0]["delta"].get("role") for c in chunks[:3]] == ["assistant"] * 3
    assert joined(CHAT, chunks) == {c["index"]: c["message"]["content"] for c in whole["choices"]}


async def test_chat_stream_opens_with_the_role(client: Client) -> None:
    chunks = await events(client, CHAT, body_for(CHAT, "hi", max_tokens=2))
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:])
    assert len(chunks) == 3


async def test_one_chunk_per_token(client: Client) -> None:
    chunks = await events(client, COMPLETIONS, body_for(COMPLETIONS, "count", return_token_ids=True))
    assert [len(c["choices"][0]["token_ids"]) for c in chunks] == [1] * (NATURAL_LENGTH + 1)
    assert chunks[-1]["choices"][0]["text"] == ""  # EOS is a token but adds no text
    assert chunks[0]["choices"][0]["prompt_token_ids"] == [token_id("count")]
    assert chunks[1]["choices"][0]["prompt_token_ids"] is None


# --- lengths and stops ---------------------------------------------------------------------------


async def test_max_tokens_ignore_eos_and_min_tokens(client: Client) -> None:
    short = (await post(client, COMPLETIONS, body_for(COMPLETIONS, "p", max_tokens=3)))["choices"][0]
    assert len(short["text"].split()) == 3 and short["finish_reason"] == "length"
    long = await post(client, COMPLETIONS, body_for(COMPLETIONS, "p", ignore_eos=True, max_tokens=20))
    assert len(long["choices"][0]["text"].split()) == 20 and long["choices"][0]["finish_reason"] == "length"
    at_least = await post(client, COMPLETIONS, body_for(COMPLETIONS, "p", min_tokens=12, max_tokens=30))
    assert len(at_least["choices"][0]["text"].split()) == 12
    assert at_least["choices"][0]["finish_reason"] == "stop" and at_least["usage"]["completion_tokens"] == 13
    default = await post(client, COMPLETIONS, body_for(COMPLETIONS, "p", ignore_eos=True))
    assert default["usage"]["completion_tokens"] == 16  # vLLM's default max_tokens


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
@pytest.mark.parametrize("include", [False, True])
async def test_stop_strings(client: Client, path: str, include: bool) -> None:
    natural = text_of(path, (await post(client, path, body_for(path, "stops")))["choices"][0])
    stop = natural.split()[4][:3]  # part of a word: vLLM matches text, not tokens
    cut = natural.index(stop) + (len(stop) if include else 0)
    body = body_for(path, "stops", stop=["never-there", stop], include_stop_str_in_output=include)
    result = (await post(client, path, body))["choices"][0]
    assert text_of(path, result) == natural[:cut]
    assert result["finish_reason"] == "stop" and result["stop_reason"] == stop
    assert joined(path, await events(client, path, body)) == {0: natural[:cut]}


async def test_stop_token_ids_and_bad_words(client: Client) -> None:
    full = (await post(client, COMPLETIONS, body_for(COMPLETIONS, "ids", return_token_ids=True)))["choices"][0]
    ids, words = full["token_ids"], tokenize(full["text"])
    assert ids == [token_id(w) for w in words] + [EOS_ID]
    at = ids.index(ids[2])
    stopped = await post(
        client, COMPLETIONS, body_for(COMPLETIONS, "ids", stop_token_ids=[ids[2]], return_token_ids=True)
    )
    choice = stopped["choices"][0]
    assert choice["token_ids"] == ids[: at + 1] and choice["text"] == "".join(words[:at])
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == ids[2]
    banned = sorted({w.strip() for w in words[:3]})
    clean = await post(
        client, COMPLETIONS, body_for(COMPLETIONS, "ids", bad_words=banned, ignore_eos=True, max_tokens=40)
    )
    assert not set(clean["choices"][0]["text"].split()) & set(banned)


# --- n, batches, seeds ---------------------------------------------------------------------------


async def test_n_and_batch_indexing(client: Client) -> None:
    batch = await post(client, COMPLETIONS, {"model": "tiny", "prompt": ["one", "two words"], "n": 2, "seed": 7})
    assert [c["index"] for c in batch["choices"]] == [0, 1, 2, 3]
    single = await post(client, COMPLETIONS, {"model": "tiny", "prompt": "two words", "n": 2, "seed": 7})
    assert [c["text"] for c in batch["choices"][2:]] == [c["text"] for c in single["choices"]]
    assert batch["choices"][0]["text"] != batch["choices"][1]["text"]
    assert batch["usage"]["prompt_tokens"] == 3  # each prompt counted once, not n times
    streamed = await events(client, COMPLETIONS, {"model": "tiny", "prompt": ["one", "two words"], "n": 2, "seed": 7})
    assert joined(COMPLETIONS, streamed) == {c["index"]: c["text"] for c in batch["choices"]}


async def test_seed_and_greedy(client: Client) -> None:
    async def text(**fields: Any) -> str:
        return str((await post(client, COMPLETIONS, body_for(COMPLETIONS, "s", **fields)))["choices"][0]["text"])

    assert await text(seed=1) != await text(seed=2)
    assert await text(temperature=0, seed=1) == await text(temperature=0, seed=2)


async def test_token_prompts_answer_like_text_prompts(client: Client) -> None:
    ids = (await post(client, "/tokenize", {"model": "tiny", "prompt": "same thing"}))["tokens"]
    by_text = await post(client, COMPLETIONS, body_for(COMPLETIONS, "same thing"))
    for prompt in (ids, [ids]):
        by_ids = await post(client, COMPLETIONS, {"model": "tiny", "prompt": prompt, "echo": True})
        assert by_ids["choices"][0]["text"] == "same thing" + by_text["choices"][0]["text"]


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "fields", "param"),
    [
        (COMPLETIONS, {"temperature": 3}, "temperature"),
        (COMPLETIONS, {"top_p": 0}, "top_p"),
        (COMPLETIONS, {"max_tokens": 0}, "max_tokens"),
        (COMPLETIONS, {"n": 0}, "n"),
        (COMPLETIONS, {"n": 2, "temperature": 0}, None),
        (COMPLETIONS, {"logprobs": 21}, "logprobs"),
        (COMPLETIONS, {"min_tokens": 20, "max_tokens": 10}, None),
        (COMPLETIONS, {"max_tokens": 5000}, "input_tokens"),
        (COMPLETIONS, {"stop": [""]}, None),
        (COMPLETIONS, {"stream_options": {"include_usage": True}}, "stream_options"),
        (COMPLETIONS, {"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
        (CHAT, {"top_logprobs": 2}, "top_logprobs"),
        (CHAT, {"logprobs": True, "top_logprobs": 21}, "logprobs"),
        (CHAT, {"temperature": -1}, "temperature"),
    ],
)
async def test_vllm_rejections(client: Client, path: str, fields: JSON, param: str | None) -> None:
    error = (await post(client, path, body_for(path, "x", **fields), status=400))["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400 and error["param"] == param
    assert error["message"]


async def test_temperature_message_is_vllms(client: Client) -> None:
    error = (await post(client, COMPLETIONS, body_for(COMPLETIONS, "x", temperature=3), status=400))["error"]
    assert error["message"] == "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (COMPLETIONS, {"prompt": "x"}, "model"),
        (COMPLETIONS, {"model": "tiny"}, "prompt"),
        (COMPLETIONS, {"model": "tiny", "prompt": []}, "prompt"),
        (COMPLETIONS, {"model": "tiny", "prompt": "x", "temperature": "hot"}, "temperature"),
        (CHAT, {"model": "tiny"}, "messages"),
    ],
)
async def test_missing_or_mistyped_fields(client: Client, path: str, body: JSON, param: str) -> None:
    error = (await post(client, path, body, status=400))["error"]
    assert error["param"] == param and error["type"] == "BadRequestError"


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]"])
async def test_bad_json_body(client: Client, raw: bytes) -> None:
    resp = await client.post(COMPLETIONS, data=raw, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert (await resp.json())["error"]["type"] == "BadRequestError"


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
async def test_unknown_model_is_404(client: Client, path: str) -> None:
    body = body_for(path, "x") | {"model": "nope", "temperature": 3}  # vLLM looks the model up first
    error = (await post(client, path, body, status=404))["error"]
    assert error == {
        "message": "The model `nope` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }


async def test_unknown_fields_are_ignored_but_recorded(client: Client) -> None:
    body = body_for(COMPLETIONS, "x", guided_json={"type": "object"}, best_of=3)
    plain = await post(client, COMPLETIONS, body_for(COMPLETIONS, "x"))
    ignored = await post(client, COMPLETIONS, body, status=200)
    assert ignored["choices"][0]["text"] == plain["choices"][0]["text"]
    seen = state(client).requests[-1]
    assert seen.path == COMPLETIONS and seen.method == "POST"
    assert seen.body["guided_json"] == {"type": "object"} and seen.body["best_of"] == 3
    assert seen.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"structured_outputs": {"choice": ["yes", "no"]}}, "yes"),
        ({"structured_outputs": {"json": {"type": "object"}}}, '{"ok": true}'),
        ({"structured_outputs": {"regex": "[0-9]+"}}, "42"),
        ({"response_format": {"type": "json_object"}}, '{"ok": true}'),
    ],
)
async def test_structured_outputs(client: Client, fields: JSON, text: str) -> None:
    choice = (await post(client, COMPLETIONS, body_for(COMPLETIONS, "x", **fields)))["choices"][0]
    assert choice["text"] == text and choice["finish_reason"] == "stop"


# --- logprobs, token ids, echo -------------------------------------------------------------------


async def test_completion_logprobs_legacy_shape(client: Client) -> None:
    result = await post(client, COMPLETIONS, body_for(COMPLETIONS, "lp", logprobs=3, max_tokens=4))
    lp = result["choices"][0]["logprobs"]
    assert lp["tokens"] == tokenize(result["choices"][0]["text"])
    assert len(lp["token_logprobs"]) == 4 and all(v < 0 for v in lp["token_logprobs"])
    assert [len(top) for top in lp["top_logprobs"]] == [3] * 4
    assert all(
        top[tok] == v for top, tok, v in zip(lp["top_logprobs"], lp["tokens"], lp["token_logprobs"], strict=True)
    )
    assert lp["text_offset"] == [0, *[sum(map(len, lp["tokens"][: i + 1])) for i in range(3)]]
    chunks = await events(client, COMPLETIONS, body_for(COMPLETIONS, "lp", logprobs=3, max_tokens=4))
    assert [c["choices"][0]["logprobs"]["text_offset"][0] for c in chunks] == lp["text_offset"]


async def test_chat_logprobs_shape(client: Client) -> None:
    result = await post(client, CHAT, body_for(CHAT, "lp", logprobs=True, top_logprobs=2, max_tokens=3))
    content = result["choices"][0]["logprobs"]["content"]
    assert len(content) == 3
    first = content[0]
    assert set(first) == {"token", "logprob", "bytes", "top_logprobs"}
    assert first["bytes"] == list(first["token"].encode()) and len(first["top_logprobs"]) == 2
    assert first["top_logprobs"][0]["token"] == first["token"]
    bare = await post(client, CHAT, body_for(CHAT, "lp", logprobs=True, max_tokens=1))
    assert bare["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []


async def test_return_token_ids_and_echo(client: Client) -> None:
    result = await post(client, COMPLETIONS, body_for(COMPLETIONS, "echo me", echo=True, return_token_ids=True))
    choice = result["choices"][0]
    assert choice["text"].startswith("echo me ")
    assert choice["prompt_token_ids"] == [token_id("echo"), token_id(" me")]
    assert choice["token_ids"][-1] == EOS_ID
    chat = await post(client, CHAT, body_for(CHAT, "hi", return_token_ids=True))
    assert chat["prompt_token_ids"] == [token_id(t) for t in tokenize("<|user|> hi\n<|assistant|>")]
    assert chat["choices"][0]["token_ids"][-1] == EOS_ID
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Well,"}]
    echoed = await post(client, CHAT, {"model": "tiny", "messages": messages, "echo": True})
    assert echoed["choices"][0]["message"]["content"].startswith("Well, ")


async def test_request_id_header_names_the_response(client: Client) -> None:
    resp = await client.post(COMPLETIONS, json=body_for(COMPLETIONS, "x"), headers={"X-Request-Id": "gw-123"})
    assert (await resp.json())["id"] == "cmpl-gw-123"


async def test_api_key(aiohttp_client: AiohttpClient) -> None:
    client = await aiohttp_client(create_app(api_key="sekret"))
    denied = await client.post(COMPLETIONS, json=body_for(COMPLETIONS, "x"))
    assert denied.status == 401
    assert (await denied.json())["error"]["code"] == "invalid_api_key"
    assert (await client.get("/health")).status == 200
    allowed = await client.post(
        COMPLETIONS, json=body_for(COMPLETIONS, "x"), headers={"Authorization": "Bearer sekret"}
    )
    assert allowed.status == 200
    assert client.app[STATE].requests[-1].headers["authorization"] == "Bearer sekret"


# --- faults --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
@pytest.mark.parametrize("status", [500, 400, 503])
async def test_fault_status(client: Client, path: str, status: int) -> None:
    error = (await post(client, path, body_for(path, f"hi [[fault:status={status}]]"), status=status))["error"]
    assert error["code"] == status and error["message"]


async def test_fault_rate_limit_with_retry_after(client: Client) -> None:
    resp = await client.post(COMPLETIONS, json=body_for(COMPLETIONS, "x [[fault:status=429,retry_after=2]]"))
    assert resp.status == 429 and resp.headers["Retry-After"] == "2"
    assert (await resp.json())["error"]["type"] == "RateLimitError"


async def test_fault_in_a_batch_prompt(client: Client) -> None:
    await post(client, COMPLETIONS, {"model": "tiny", "prompt": ["fine", "x [[fault:status=500]]"]}, status=500)


@pytest.mark.parametrize("stream", [False, True])
async def test_fault_reset_before(client: Client, stream: bool) -> None:
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post(COMPLETIONS, json=body_for(COMPLETIONS, "x [[fault:reset_before]]", stream=stream))


async def test_fault_reset_after_on_a_non_streaming_request(client: Client) -> None:
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post(COMPLETIONS, json=body_for(COMPLETIONS, "x [[fault:reset_after=3]]"))


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
async def test_fault_reset_after_three_token_chunks(client: Client, path: str) -> None:
    resp = await client.post(path, json=body_for(path, "x [[fault:reset_after=3]]", stream=True))
    assert resp.status == 200
    lines: list[bytes] = []
    with pytest.raises(aiohttp.ClientPayloadError):
        async for line in resp.content:
            lines.append(line)
    data = [json.loads(line[6:]) for line in lines if line.startswith(b"data: ")]
    with_text = [d for d in data if "role" not in d["choices"][0].get("delta", {})]
    assert len(with_text) == 3 and b"data: [DONE]\n" not in lines
    assert state(client).cancelled == 0  # the server hung up, not the client


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
async def test_fault_error_event_after_two_token_chunks(client: Client, path: str) -> None:
    chunks = await events(client, path, body_for(path, "x [[fault:error_after=2]]"))
    *tokens, error = chunks
    assert len([c for c in tokens if "role" not in c["choices"][0].get("delta", {})]) == 2
    assert error["error"]["code"] == 500 and error["error"]["type"] == "InternalServerError"


async def test_fault_hang_before(client: Client) -> None:
    started = time.monotonic()
    await post(client, COMPLETIONS, body_for(COMPLETIONS, "x [[fault:hang_before=0.3]]"))
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize("kind", ["hang_between", "slow"])
async def test_fault_gaps_between_chunks(client: Client, kind: str) -> None:
    started = time.monotonic()
    chunks = await events(client, COMPLETIONS, body_for(COMPLETIONS, f"x [[fault:{kind}=0.05]]", max_tokens=4))
    assert len(chunks) == 4
    assert time.monotonic() - started >= 4 * 0.05  # three gaps between chunks, one before [DONE]


async def test_fault_once_lets_the_retry_through(client: Client) -> None:
    body = body_for(COMPLETIONS, "x [[fault:once:status=503,id=a]]")
    await post(client, COMPLETIONS, body, status=503)
    await post(client, COMPLETIONS, body)
    await post(client, COMPLETIONS, body_for(COMPLETIONS, "x [[fault:once:status=503,id=b]]"), status=503)


async def test_unknown_fault_key_fails_loudly(client: Client) -> None:
    error = (await post(client, COMPLETIONS, body_for(COMPLETIONS, "x [[fault:explode=1]]"), status=500))["error"]
    assert "explode" in error["message"]


async def test_client_hanging_up_mid_stream_is_counted(client: Client) -> None:
    body = body_for(COMPLETIONS, "x [[fault:slow=0.05]]", stream=True, ignore_eos=True, max_tokens=200)
    resp = await client.post(COMPLETIONS, json=body)
    await resp.content.readline()
    assert state(client).active == 1
    resp.close()
    await eventually(lambda: state(client).cancelled == 1 and state(client).active == 0)


async def test_client_giving_up_during_hang_is_counted(client: Client) -> None:
    with pytest.raises(TimeoutError):
        await client.post(
            COMPLETIONS,
            json=body_for(COMPLETIONS, "x [[fault:hang_before=30]]"),
            timeout=aiohttp.ClientTimeout(total=0.2),
        )
    await eventually(lambda: state(client).cancelled == 1 and state(client).active == 0)


# --- running it ----------------------------------------------------------------------------------


async def test_start_upstream_on_a_real_port() -> None:
    async with await start_upstream(models=["m1"], api_key="k") as upstream, aiohttp.ClientSession() as session:
        assert upstream.url.startswith("http://127.0.0.1:") and upstream.url.endswith("/v1")
        headers = {"Authorization": "Bearer k"}
        async with session.post(
            upstream.url + "/completions", json={"model": "m1", "prompt": "x"}, headers=headers
        ) as r:
            assert r.status == 200
        assert [r.path for r in upstream.requests] == ["/v1/completions"]
        assert upstream.active == 0 and upstream.cancelled == 0


async def test_stream_cancelled_on_a_real_port() -> None:
    async with await start_upstream() as upstream, aiohttp.ClientSession() as session:
        body = {"model": "tiny", "prompt": "x [[fault:hang_between=0.05]]", "stream": True, "ignore_eos": True}
        async with session.post(upstream.url + "/completions", json=body) as resp:
            await resp.content.readline()
        await eventually(lambda: upstream.cancelled == 1 and upstream.active == 0)


async def test_runs_as_a_subprocess() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.openai_upstream", "--port", "0", "--model", "a", "--model", "b",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert line.startswith("READY http://127.0.0.1:")
        url = line.split()[1]
        async with aiohttp.ClientSession() as session, session.get(url + "/models") as resp:
            assert [m["id"] for m in (await resp.json())["data"]] == ["a", "b"]
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0

"""The gateway in front of the real vLLM engine (CPU): each dialect's completions and streams, and the
Friendli samplers vLLM serves natively or through this project's plugins, checked on real outputs."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.vllm.conftest import VLLM
from tests.vllm.engine_stats import HANG_UP_TOKENS, assert_hang_ups_abort
from tests.vllm.served import served, tier_config

pytestmark = pytest.mark.vllm
KEY = "gw-vllm-key"
BEARER = {"Authorization": f"Bearer {KEY}"}
PROMPT = "the quick brown fox"


class GW:
    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def post(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
        async with self.session.post(self.url + path, json=body, headers=headers or BEARER) as resp:
            raw = await resp.read()
            if resp.content_type == "text/event-stream":
                return resp.status, [
                    json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: {")
                ]
            return resp.status, json.loads(raw)


@pytest.fixture
async def gw(vllm_server: VLLM) -> AsyncIterator[GW]:
    extra = ["no_repeat_ngram", "xtc", "forced_output_tokens", "max_total_tokens", "min_total_tokens"]
    target = {"provider": "vllm", "base_url": vllm_server.url, "extra_features": extra}
    config = tier_config([{"name": "tiny", "aliases": ["meta/tiny"], "targets": [target]}], KEY)
    async with served(config) as url, aiohttp.ClientSession() as session:
        yield GW(url, session)


async def direct(vllm: VLLM, body: dict[str, Any]) -> Any:
    async with aiohttp.ClientSession() as s, s.post(vllm.url + "/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


DIALECTS = {
    "openai": ("/v1/completions", BEARER, "tiny"),
    "friendli": ("/serverless/v1/completions", BEARER, "tiny"),
    "sgp": ("/v4/beta/completions", {"x-api-key": KEY}, "meta/tiny"),
    "sgp5": ("/v5/completions", {"x-api-key": KEY}, "meta/tiny"),
    "octoai": ("/v1/completions", {**BEARER, "X-Fern-SDK-Name": "octoai"}, "tiny"),
}


async def test_each_choice_reports_the_seed_that_reproduces_it(gw: GW) -> None:
    """One seed for n choices: vLLM samples choice j with seed + j, which is what Friendli's answer
    reports for it; asked alone with that seed, vLLM gives that choice's text again."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "temperature": 1.0, "n": 3, "seed": 1234}
    status, many = await gw.post("/serverless/v1/completions", body)
    assert status == 200, many
    for choice in many["choices"]:
        assert choice["seed"] == 1234 + choice["index"], choice
        status, alone = await gw.post("/serverless/v1/completions", {**body, "n": 1, "seed": choice["seed"]})
        assert status == 200 and alone["choices"][0]["text"] == choice["text"], (choice, alone)


@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_dialects_whole_and_streamed_agree(gw: GW, vllm_server: VLLM, dialect: str) -> None:
    path, headers, model = DIALECTS[dialect]
    body = {"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0}
    status, whole = await gw.post(path, body, headers)
    assert status == 200, whole
    status, chunks = await gw.post(path, {**body, "stream": True}, headers)
    assert status == 200
    streamed = "".join(ch.get("text", "") for c in chunks for ch in c.get("choices", []))
    assert streamed == whole["choices"][0]["text"]
    expected = await direct(vllm_server, {"model": "tiny", "prompt": PROMPT, "max_tokens": 12, "temperature": 0})
    assert whole["choices"][0]["text"] == expected["choices"][0]["text"]
    assert whole["usage"]["completion_tokens"] == expected["usage"]["completion_tokens"]
    if dialect == "friendli":
        choice = whole["choices"][0]
        assert isinstance(choice["seed"], int) and len(choice["tokens"]) == whole["usage"]["completion_tokens"]
        # vLLM's chunks, relayed, are Friendli's: one sampled "token" per chunk, no fingerprint, no lists
        streamed_ids = [ch["token"] for c in chunks for ch in c["choices"] if "token" in ch]
        # one per chunk (the last of a chunk's, should vLLM put several in one): in order, ending alike
        tokens = iter(choice["tokens"])
        assert streamed_ids and all(t in tokens for t in streamed_ids) and streamed_ids[-1] == choice["tokens"][-1]
        assert not any("token_ids" in ch for c in chunks for ch in c["choices"])
        assert not any("system_fingerprint" in c for c in chunks)
    if dialect == "octoai":
        assert all(c["system_fingerprint"] for c in chunks)  # octoai drops a chunk without one


async def test_friendli_chat_streams_carry_the_sampled_tokens(gw: GW) -> None:
    """vLLM's chat chunks, relayed to a Friendli client: each carries its sampled "token" (the gateway
    asks vLLM for ids), the text and tokens agree with the whole answer's, no vLLM field names leak."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 12, "temperature": 0}
    status, whole = await gw.post("/serverless/v1/chat/completions", body)
    assert status == 200, whole
    status, chunks = await gw.post("/serverless/v1/chat/completions", {**body, "stream": True})
    assert status == 200
    choices = [ch for c in chunks for ch in c["choices"]]
    text = "".join(ch["delta"].get("content") or "" for ch in choices)
    assert text == whole["choices"][0]["message"]["content"]
    streamed_ids = [ch["token"] for ch in choices if "token" in ch]
    tokens = iter(whole["choices"][0]["tokens"])
    assert streamed_ids and all(t in tokens for t in streamed_ids)
    assert not any("token_ids" in ch or "system_fingerprint" in c for c in chunks for ch in c["choices"])


async def test_bad_words_never_appear(gw: GW) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    _, free = await gw.post("/v1/completions", body)
    words = re.findall(r"[A-Za-z]{3,}", free["choices"][0]["text"])[:2]
    assert words, free
    friendli = {k: v for k, v in body.items() if k != "ignore_eos"} | {"bad_words": words, "min_tokens": 40}
    status, banned = await gw.post("/serverless/v1/completions", friendli)
    assert status == 200, banned
    text = banned["choices"][0]["text"]
    assert not any(w in text for w in words), (words, text)


def repeated_ngrams(ids: list[int], n: int) -> int:
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) - len(set(grams))


async def test_no_repeat_ngram_plugin(gw: GW) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 48, "temperature": 0}
    _, plain = await gw.post("/serverless/v1/completions", body)
    _, blocked = await gw.post("/serverless/v1/completions", {**body, "no_repeat_ngram": 2})
    assert repeated_ngrams(plain["choices"][0]["tokens"], 2) > 0, "the tiny model should repeat itself"
    assert repeated_ngrams(blocked["choices"][0]["tokens"], 2) == 0


async def test_structured_outputs(gw: GW) -> None:
    base = {"model": "tiny", "prompt": PROMPT, "max_tokens": 20, "temperature": 0}
    _, regex = await gw.post(
        "/serverless/v1/completions", {**base, "response_format": {"type": "regex", "schema": "[0-9]{3}"}}
    )
    assert re.fullmatch("[0-9]{3}", regex["choices"][0]["text"]), regex
    _, choice = await gw.post(
        "/v4/beta/completions", {**base, "model": "meta/tiny", "guided_choice": ["yes", "no"]}, {"x-api-key": KEY}
    )
    assert choice["choices"][0]["text"] in ("yes", "no"), choice
    schema = {
        "type": "object",
        "properties": {"a": {"type": "boolean"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"schema": schema}}
    status, js = await gw.post("/serverless/v1/completions", {**base, "max_tokens": 40, "response_format": fmt})
    assert status == 200, js
    if js["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(js["choices"][0]["text"])["a"], bool)


async def test_token_prompt_and_forced_output(gw: GW, vllm_server: VLLM) -> None:
    ids = [5, 17, 42, 99]
    _, mine = await gw.post(
        "/serverless/v1/completions", {"model": "tiny", "tokens": ids, "max_tokens": 8, "temperature": 0}
    )
    theirs = await direct(vllm_server, {"model": "tiny", "prompt": ids, "max_tokens": 8, "temperature": 0})
    assert mine["choices"][0]["text"] == theirs["choices"][0]["text"]
    forced = [7, 8, 9]
    _, out = await gw.post(
        "/serverless/v1/completions",
        {"model": "tiny", "prompt": PROMPT, "max_tokens": 3, "forced_output_tokens": forced, "logprobs": 1},
    )
    assert out["choices"][0]["tokens"] == forced


async def test_max_total_tokens_plugin(gw: GW) -> None:
    body = {"model": "tiny", "tokens": [5, 6, 7, 8, 9], "max_total_tokens": 12, "temperature": 0}
    status, out = await gw.post("/serverless/v1/completions", body)
    assert status == 200, out
    assert out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] <= 12
    low = {"model": "tiny", "tokens": [5, 6, 7], "min_total_tokens": 20, "max_tokens": 40, "temperature": 0}
    _, out = await gw.post("/serverless/v1/completions", low)
    assert out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] >= 20


async def test_vllm_ranges_answer_in_dialect(gw: GW) -> None:
    status, out = await gw.post("/serverless/v1/completions", {"model": "tiny", "prompt": "x", "temperature": 3})
    assert status == 400 and out["error"]["param"] == "temperature"
    status, out = await gw.post(
        "/serverless/v1/completions", {"model": "tiny", "prompt": "x", "n": 2, "temperature": 0}
    )
    assert status == 400 and out["error"]["param"] == "n"
    status, out = await gw.post(
        "/serverless/v1/completions", {"model": "tiny", "prompt": "x", "stop_tokens": [{"tokens": [1, 2]}]}
    )
    assert status == 400 and out["error"]["param"] == "stop_tokens"


async def test_disconnect_aborts_the_request_in_vllm(gw: GW, vllm_server: VLLM) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": HANG_UP_TOKENS, "ignore_eos": True}
    print(await assert_hang_ups_abort(gw.url + "/v1/completions", body, BEARER, [vllm_server]))


async def test_xtc_plugin(gw: GW) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    _, greedy = await gw.post("/serverless/v1/completions", body)
    _, off = await gw.post("/serverless/v1/completions", {**body, "xtc_threshold": 0.1, "xtc_probability": 0.0})
    _, on = await gw.post("/serverless/v1/completions", {**body, "xtc_threshold": 0.001, "xtc_probability": 1.0})
    assert off["choices"][0]["tokens"] == greedy["choices"][0]["tokens"]
    assert on["choices"][0]["tokens"] != greedy["choices"][0]["tokens"]
    status, bad = await gw.post("/serverless/v1/completions", {**body, "xtc_probability": 1.5})
    assert status == 400 and bad["error"]["param"] == "xtc_probability"

"""This project's vLLM logits-processor plugins (backends/vllm_plugins), and the vLLM-native sampling
fields the gateway relies on, checked against the real engine over its HTTP API (no gateway)."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.vllm.conftest import VLLM

pytestmark = pytest.mark.vllm

PROMPT = "the quick brown fox"
TOKENS = [5, 17, 42, 99, 7]  # a token-id prompt: its length is exact (no BOS added)


class Client:
    def __init__(self, vllm: VLLM, session: aiohttp.ClientSession) -> None:
        self.vllm, self.session = vllm, session

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        async with self.session.post(self.vllm.base + path, json=body) as resp:
            return resp.status, await resp.json(content_type=None)

    async def complete(self, **fields: Any) -> dict[str, Any]:
        """A completion that must succeed; greedy and with token ids unless told otherwise."""
        body = {"model": self.vllm.model, "temperature": 0, "return_token_ids": True, **fields}
        status, out = await self.post("/v1/completions", body)
        assert status == 200, out
        choice = out["choices"][0]
        return {**choice, "usage": out["usage"]}

    async def tokenize(self, text: str) -> list[int]:
        body = {"model": self.vllm.model, "prompt": text, "add_special_tokens": False}
        status, out = await self.post("/tokenize", body)
        assert status == 200, out
        return list(out["tokens"])


@pytest.fixture
async def client(vllm_server: VLLM) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        yield Client(vllm_server, session)


@pytest.fixture(scope="session")
def eos(vllm_server: VLLM) -> int:
    return int(json.loads((vllm_server.model_dir / "config.json").read_text())["eos_token_id"])


def repeats(ids: list[int], n: int) -> int:
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) - len(set(grams))


def contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i : i + len(part)] == part for i in range(len(ids) - len(part) + 1))


# no_repeat_ngram


@pytest.mark.parametrize("n", [2, 3])
async def test_no_repeat_ngram_blocks_every_repeated_ngram(client: Client, n: int) -> None:
    body = {"prompt": PROMPT, "max_tokens": 48, "ignore_eos": True}
    plain = await client.complete(**body)
    seq = plain["prompt_token_ids"] + plain["token_ids"]
    assert repeats(seq, n) > 0, "the tiny model should repeat itself without the plugin"

    blocked = await client.complete(**body, vllm_xargs={"no_repeat_ngram_size": n})
    assert len(blocked["token_ids"]) == 48
    assert repeats(blocked["prompt_token_ids"] + blocked["token_ids"], n) == 0


@pytest.mark.parametrize("n", [0, 1])
async def test_no_repeat_ngram_sizes_up_to_one_are_off(client: Client, n: int) -> None:
    body = {"prompt": PROMPT, "max_tokens": 24, "ignore_eos": True}
    plain = await client.complete(**body)
    off = await client.complete(**body, vllm_xargs={"no_repeat_ngram_size": n})
    assert off["token_ids"] == plain["token_ids"]


# forced_output


async def test_forced_output_tokens_come_out_exactly(client: Client) -> None:
    forced = [5, 17, 42, 99, 7]
    plain = await client.complete(prompt=PROMPT, max_tokens=8, ignore_eos=True)
    assert plain["token_ids"][: len(forced)] != forced
    out = await client.complete(
        prompt=PROMPT, max_tokens=8, ignore_eos=True, logprobs=1, vllm_xargs={"forced_output_tokens": forced}
    )
    assert out["token_ids"][: len(forced)] == forced
    assert len(out["token_ids"]) == 8  # free generation afterwards
    # logprobs are the model's own (raw logits), the point of forcing in multiple-choice evaluation
    logprobs = out["logprobs"]["token_logprobs"][: len(forced)]
    assert all(math.isfinite(lp) and lp < 0 for lp in logprobs), logprobs


async def test_forced_output_under_random_sampling_and_a_forced_eos_stops(client: Client, eos: int) -> None:
    forced = [9, 8, 7]
    out = await client.complete(
        prompt=PROMPT, max_tokens=6, temperature=1.5, seed=3, vllm_xargs={"forced_output_tokens": forced}
    )
    assert out["token_ids"][:3] == forced
    stopped = await client.complete(prompt=PROMPT, max_tokens=6, vllm_xargs={"forced_output_tokens": [9, eos, 9]})
    assert stopped["token_ids"] == [9, eos]
    assert stopped["finish_reason"] == "stop"


# total_length


async def test_max_total_tokens_ends_generation_at_the_total(client: Client, eos: int) -> None:
    plain = await client.complete(prompt=TOKENS, max_tokens=20)
    assert eos not in plain["token_ids"], "precondition: no natural EOS early on"
    assert plain["usage"]["prompt_tokens"] == len(TOKENS)
    for total in (12, 9, len(TOKENS) + 1):
        out = await client.complete(prompt=TOKENS, max_tokens=100, vllm_xargs={"max_total_tokens": total})
        usage = out["usage"]
        assert usage["prompt_tokens"] + usage["completion_tokens"] == total, (total, out)
        assert out["token_ids"][-1] == eos and out["finish_reason"] == "stop"
        assert out["token_ids"][:-1] == plain["token_ids"][: total - len(TOKENS) - 1]  # untouched before


async def test_min_total_tokens_holds_off_eos_and_stop_tokens(client: Client, eos: int) -> None:
    eager = {"logit_bias": {str(eos): 100}}  # the model would end at once
    first = await client.complete(prompt=TOKENS, max_tokens=40, **eager)
    assert first["token_ids"] == [eos]
    out = await client.complete(prompt=TOKENS, max_tokens=40, **eager, vllm_xargs={"min_total_tokens": 20})
    assert out["usage"]["completion_tokens"] >= 20 - len(TOKENS)
    # EOS is the first token allowed, at prompt + output == 20
    assert out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] == 21
    assert out["token_ids"][-1] == eos and eos not in out["token_ids"][:-1]

    plain = await client.complete(prompt=TOKENS, max_tokens=20)
    stop = plain["token_ids"][1]  # a stop token id that would end generation at the second token
    short = await client.complete(prompt=TOKENS, max_tokens=20, stop_token_ids=[stop])
    assert len(short["token_ids"]) <= 2
    held = await client.complete(
        prompt=TOKENS, max_tokens=20, stop_token_ids=[stop], vllm_xargs={"min_total_tokens": 15}
    )
    assert len(held["token_ids"]) >= 15 - len(TOKENS)
    assert stop not in held["token_ids"][: 15 - len(TOKENS)]


async def test_min_and_max_total_tokens_together(client: Client, eos: int) -> None:
    bounds = {"min_total_tokens": 10, "max_total_tokens": 14}
    eager = await client.complete(prompt=TOKENS, max_tokens=40, logit_bias={str(eos): 100}, vllm_xargs=bounds)
    assert eager["usage"]["prompt_tokens"] + eager["usage"]["completion_tokens"] == 11
    late = await client.complete(prompt=TOKENS, max_tokens=40, vllm_xargs=bounds)
    assert late["usage"]["prompt_tokens"] + late["usage"]["completion_tokens"] == 14


# xtc


async def test_xtc_changes_greedy_output_only_when_it_fires(client: Client) -> None:
    body = {"prompt": PROMPT, "max_tokens": 16, "ignore_eos": True}
    plain = await client.complete(**body, logprobs=5)
    top = sorted(math.exp(lp) for lp in plain["logprobs"]["top_logprobs"][0].values())
    threshold = top[-2] * 0.99  # the two most likely first tokens are both "top choices"

    off = await client.complete(**body, vllm_xargs={"xtc_threshold": threshold, "xtc_probability": 0.0})
    assert off["token_ids"] == plain["token_ids"]
    on = await client.complete(**body, vllm_xargs={"xtc_threshold": threshold, "xtc_probability": 1.0})
    assert on["token_ids"][0] != plain["token_ids"][0]
    assert on["token_ids"] != plain["token_ids"]
    unreachable = await client.complete(**body, vllm_xargs={"xtc_threshold": 0.9, "xtc_probability": 1.0})
    assert unreachable["token_ids"] == plain["token_ids"]  # fewer than two tokens that likely: no change


async def test_xtc_with_a_seed_is_reproducible(client: Client) -> None:
    body = {"prompt": PROMPT, "max_tokens": 24, "ignore_eos": True, "seed": 11}
    xtc = {"xtc_threshold": 0.001, "xtc_probability": 0.5}
    first = await client.complete(**body, vllm_xargs=xtc)
    second = await client.complete(**body, vllm_xargs=xtc)
    assert first["token_ids"] == second["token_ids"]


# validation: bad values are 400 with the key as param


@pytest.mark.parametrize(
    "xargs",
    [
        {"no_repeat_ngram_size": -1},
        {"no_repeat_ngram_size": "3"},
        {"no_repeat_ngram_size": 2.5},
        {"xtc_threshold": 1.5, "xtc_probability": 1.0},
        {"xtc_threshold": 0.1, "xtc_probability": -0.1},
        {"forced_output_tokens": [1, -2]},
        {"forced_output_tokens": 7},
        {"min_total_tokens": 0},
        {"max_total_tokens": "12"},
        {"min_total_tokens": 9, "max_total_tokens": 5},
        {"bad_word_tokens": [5, -1, -1, 6]},  # an empty sequence between two separators
        {"bad_word_tokens": [5, -2]},
        {"stop_token_sequences": [-1, 5]},
        {"stop_token_sequences": ["5", 6]},
    ],
)
async def test_bad_plugin_values_are_rejected_with_400(client: Client, xargs: dict[str, Any]) -> None:
    body = {"model": client.vllm.model, "prompt": PROMPT, "max_tokens": 4, "vllm_xargs": xargs}
    status, out = await client.post("/v1/completions", body)
    assert status == 400, out
    assert out["error"]["param"] in xargs, out


# several plugins in one batch (rows of the same engine step)


async def test_plugins_side_by_side_in_one_batch(client: Client, eos: int) -> None:
    forced = [11, 12, 13, 14]
    jobs = [
        client.complete(prompt=PROMPT, max_tokens=40, ignore_eos=True, vllm_xargs={"no_repeat_ngram_size": 2}),
        client.complete(prompt=TOKENS, max_tokens=10, vllm_xargs={"forced_output_tokens": forced}),
        client.complete(prompt=TOKENS, max_tokens=100, vllm_xargs={"max_total_tokens": 17}),
        client.complete(prompt=PROMPT, max_tokens=40, ignore_eos=True),
    ]
    ngram, force, total, plain = await asyncio.gather(*jobs)
    assert repeats(ngram["prompt_token_ids"] + ngram["token_ids"], 2) == 0
    assert force["token_ids"][:4] == forced
    assert total["usage"]["prompt_tokens"] + total["usage"]["completion_tokens"] == 17
    assert len(plain["token_ids"]) == 40 and repeats(plain["prompt_token_ids"] + plain["token_ids"], 2) > 0


# vLLM-native fields the gateway maps Friendli/SGP samplers onto


async def test_native_bad_words(client: Client) -> None:
    plain = await client.complete(prompt=PROMPT, max_tokens=30, ignore_eos=True)
    words = re.findall(r"[A-Za-z]{3,}", plain["text"])[:2]
    assert words, plain
    out = await client.complete(prompt=PROMPT, max_tokens=30, ignore_eos=True, bad_words=words)
    for word in words:  # vLLM bans the word's tokens with and without a leading space
        for form in (word, " " + word):
            assert not contains(out["token_ids"], await client.tokenize(form)), (form, out)


async def test_native_min_tokens(client: Client, eos: int) -> None:
    eager = {"logit_bias": {str(eos): 100}}
    assert (await client.complete(prompt=PROMPT, max_tokens=30, **eager))["token_ids"] == [eos]
    out = await client.complete(prompt=PROMPT, max_tokens=30, min_tokens=10, **eager)
    assert len(out["token_ids"]) == 11 and out["token_ids"][-1] == eos and out["finish_reason"] == "stop"


async def test_native_stop_token_ids(client: Client) -> None:
    plain = await client.complete(prompt=PROMPT, max_tokens=20, ignore_eos=True)
    stop = plain["token_ids"][3]
    cut = plain["token_ids"].index(stop)
    out = await client.complete(prompt=PROMPT, max_tokens=20, ignore_eos=True, stop_token_ids=[stop])
    assert out["token_ids"] == plain["token_ids"][: cut + 1]
    assert out["finish_reason"] == "stop" and out["stop_reason"] == stop


async def test_native_structured_outputs(client: Client) -> None:
    regex = await client.complete(prompt=PROMPT, max_tokens=20, structured_outputs={"regex": "[0-9]{3}"})
    assert re.fullmatch("[0-9]{3}", regex["text"]), regex
    choice = await client.complete(prompt=PROMPT, max_tokens=20, structured_outputs={"choice": ["yes", "no"]})
    assert choice["text"] in ("yes", "no"), choice

"""The seed APIs' fields a local vLLM serves through the gateway (issue 28): Friendli's
``bad_word_tokens`` and multi-token ``stop_tokens`` (this project's plugins), Friendli 2024 beam search
(vLLM's beam search) and OctoAI's ``loglikelihood`` (vLLM's prompt logprobs), each answered by the
real engine and parsed by the vendor's own SDK (friendli-client 1.5.8, octoai 1.11), run from its venv
as a subprocess against the gateway. Nothing here hard-codes what the random model says: every check
compares against the model's own answer without the feature, or vLLM's own answer for it."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.runtime.config import parse_config
from tests.sdk.conftest import clean_env, sdk_envs  # noqa: F401  (the SDK venvs fixture)
from tests.vllm.conftest import VLLM
from tests.vllm.served import served, tier_config
from tests.vllm.test_vllm import KEY, PROMPT, direct

pytestmark = pytest.mark.vllm
EXTRA = ["no_repeat_ngram", "xtc", "bad_word_tokens", "stop_token_sequences"]
PROMPTS = ["the quick brown fox", "once upon a time", "hello world", "a b c d"]
SEEDS = [11, 12, 13, 14]

FRIENDLI_CLIENT = """
import json, sys
from friendli import Friendli
from friendli.errors import APIError
args = json.loads(sys.argv[1])
out = []
for kw in args["calls"]:
    client = Friendli(token=args["key"], team_id="t", base_url=args["url"])  # its globals: built per call
    try:
        r = client.completions.create(model="tiny", **{"stream": False, **kw})
        out.append({"choices": [{"text": c.text, "tokens": c.tokens, "seed": c.seed} for c in r.choices]})
    except APIError as exc:
        out.append({"status": exc.__cause__.response.status_code, "error": str(exc)})
print(json.dumps(out))
"""

OCTOAI = """
import json, sys
from octoai.client import OctoAI
from octoai.environment import OctoAIEnvironment
args = json.loads(sys.argv[1])
env = OctoAIEnvironment(default=args["url"], image_gen=args["url"], text_gen=args["url"])
text_gen = OctoAI(api_key=args["key"], environment=env, timeout=60).text_gen
r = text_gen.create_completion(**args["call"])
whole = [[c.token, c.logprob] for c in r.choices[0].logprobs.content]
streamed, text = [], ""
for chunk in text_gen.create_completion_stream(**args["call"]):
    for ch in chunk.choices:
        text += ch.text
        streamed += [[c.token, c.logprob] for c in (ch.logprobs.content if ch.logprobs else None) or ()]
print(json.dumps({"text": r.choices[0].text, "logprobs": whole, "streamed_text": text, "streamed": streamed}))
"""


@pytest.fixture
async def gw(vllm_server: VLLM) -> AsyncIterator[str]:
    target = {"provider": "vllm", "base_url": vllm_server.url, "extra_features": EXTRA}
    async with served(tier_config([{"name": "tiny", "targets": [target]}], KEY)) as url:
        yield url


async def sdk(envs: Path, name: str, script: str, args: dict[str, Any], home: Path) -> Any:
    """Runs ``script`` with the SDK venv's Python (the gateway serves on this loop meanwhile)."""
    proc = await asyncio.create_subprocess_exec(
        str(envs / name / "bin" / "python"),
        "-c",
        script,
        json.dumps(args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(HOME=str(home), FRIENDLI_TOKEN="", OCTOAI_TOKEN=""),
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def friendli(envs: Path, url: str, home: Path, calls: list[dict[str, Any]]) -> list[Any]:
    result: list[Any] = await sdk(
        envs, "friendli-client", FRIENDLI_CLIENT, {"url": url, "key": KEY, "calls": calls}, home
    )
    return result


def contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i : i + len(part)] == part for i in range(len(ids) - len(part) + 1))


async def test_bad_word_tokens_never_appear(gw: str, sdk_envs: Path, tmp_path: Path) -> None:  # noqa: F811
    sample = {"prompt": PROMPT, "max_tokens": 24, "temperature": 1.0}
    plain = await friendli(sdk_envs, gw, tmp_path, [{**sample, "seed": [s]} for s in SEEDS])
    outputs = [answer["choices"][0]["tokens"] for answer in plain]
    pairs = Counter(tuple(t[i : i + 2]) for t in outputs for i in range(len(t) - 1))
    pair = list(pairs.most_common(1)[0][0])  # a sequence the seeded samples do generate
    banned_calls = [{**sample, "seed": [s], "bad_word_tokens": [{"tokens": pair}]} for s in SEEDS]
    banned = await friendli(sdk_envs, gw, tmp_path, banned_calls)
    assert all(len(b["choices"][0]["tokens"]) > 0 for b in banned)
    assert not any(contains(b["choices"][0]["tokens"], pair) for b in banned), pair
    assert any(contains(t, pair) for t in outputs)


async def test_multi_token_stop_tokens_end_the_answer(gw: str, sdk_envs: Path, tmp_path: Path) -> None:  # noqa: F811
    greedy = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0.0, "seed": [1]}
    (plain,) = await friendli(sdk_envs, gw, tmp_path, [greedy])
    tokens = plain["choices"][0]["tokens"]
    stop = tokens[5:7]  # ends where its first occurrence ends
    end = next(i + 2 for i in range(len(tokens) - 1) if tokens[i : i + 2] == stop)
    (stopped,) = await friendli(sdk_envs, gw, tmp_path, [{**greedy, "stop_tokens": [{"tokens": stop}]}])
    assert stopped["choices"][0]["tokens"] == tokens[:end]  # the sequence ends it: nothing after


async def post(url: str, body: dict[str, Any]) -> tuple[list[int], int, str | None]:
    """A Friendli completion's tokens, billed completion tokens and finish reason, whole or streamed."""
    headers = {"Authorization": f"Bearer {KEY}", "X-Friendli-Team": "t"}
    async with aiohttp.ClientSession() as session, session.post(url, json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        if not body.get("stream"):
            answer = await resp.json()
            choice = answer["choices"][0]
            return choice["tokens"], answer["usage"]["completion_tokens"], choice["finish_reason"]
        tokens, billed, reason = [], -1, None
        async for line in resp.content:
            if line.startswith(b"data: {"):
                chunk = json.loads(line[6:])
                for c in chunk.get("choices") or ():
                    tokens += [c["token"]] if c.get("token") is not None else []
                    reason = c.get("finish_reason") or reason
                billed = (chunk.get("usage") or {}).get("completion_tokens", billed)
        return tokens, billed, reason


async def test_every_token_stop_ends_the_answer_at_the_stop_whole_and_streamed(gw: str, vllm_server: VLLM) -> None:
    """A stop of one token (vLLM's ``stop_token_ids``) or of several (the plugin, which forces an end
    token after the sequence): the answer, its ids and its billed tokens end with the stop, whole and
    streamed; nothing of the end token the plugin forced is shown or billed."""
    url = gw + "/serverless/v1/completions"
    greedy = {"model": "tiny", "prompt": PROMPT, "max_tokens": 24, "temperature": 0.0}
    tokens, _, _ = await post(url, greedy)
    for stop in (tokens[5:6], tokens[5:7], tokens[4:7]):
        end = next(i + len(stop) for i in range(len(tokens)) if tokens[i : i + len(stop)] == stop)
        for stream in (False, True):
            body = {**greedy, "stop_tokens": [{"tokens": stop}], "stream": stream}
            body |= {"stream_options": {"include_usage": True}} if stream else {}
            assert await post(url, body) == (tokens[:end], end, "stop"), (stop, stream)
    raw = {**greedy, "return_token_ids": True, "vllm_xargs": {"stop_token_sequences": tokens[5:7]}}
    forced = (await direct(vllm_server, raw))["choices"][0]["token_ids"]
    end = next(i + 2 for i in range(len(tokens)) if tokens[i : i + 2] == tokens[5:7])
    assert forced[:end] == tokens[:end] and len(forced) == end + 1  # what vLLM itself answers


async def test_friendli_beam_search_is_vllm_beam_search(
    gw: str,
    vllm_server: VLLM,
    sdk_envs: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    calls = [{"prompt": p, "max_tokens": 8, "num_beams": 4, "length_penalty": 0.8} for p in PROMPTS]
    # vLLM's beam search at temperature 0, as the gateway asks for it: at any other, each step adds a
    # randomly sampled token to the candidates (and the random model's logprobs are near-equal)
    beam = {"model": "tiny", "max_tokens": 8, "n": 4, "use_beam_search": True, "length_penalty": 0.8}
    theirs = [await direct(vllm_server, {**beam, "prompt": p, "temperature": 0}) for p in PROMPTS]
    first = await friendli(sdk_envs, gw, tmp_path, calls)
    again = await friendli(sdk_envs, gw, tmp_path, calls)
    for answer, repeat, best in zip(first, again, theirs, strict=True):
        assert len(answer["choices"]) == 1
        assert answer["choices"][0]["tokens"] == repeat["choices"][0]["tokens"]  # the same for the same input
        assert answer["choices"][0]["text"] == best["choices"][0]["text"]  # vLLM's best beam
    greedy = await friendli(
        sdk_envs, gw, tmp_path, [{"prompt": p, "max_tokens": 8, "temperature": 0.0} for p in PROMPTS]
    )
    assert any(b["choices"][0]["tokens"] != g["choices"][0]["tokens"] for b, g in zip(first, greedy, strict=True))

    refusals = [
        {"early_stopping": True},
        {"beam_compat_pre_normalization": True},
        {"stop_tokens": [{"tokens": [5, 6]}]},
        {"n": 2},
        {"stream": True},
    ]
    refused = await friendli(sdk_envs, gw, tmp_path, [{**calls[0], **r} for r in refusals])
    for extra, answer in zip(refusals, refused, strict=True):
        name = next(iter(extra))
        assert answer["status"] == 400 and f"'{name}'" in answer["error"], answer


async def test_octoai_loglikelihood_is_the_sum_of_vllm_prompt_logprobs_whole_and_streamed(
    gw: str,
    vllm_server: VLLM,
    sdk_envs: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    call = {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "temperature": 0.0, "loglikelihood": True}
    answer = await sdk(sdk_envs, "octoai", OCTOAI, {"url": gw, "key": KEY, "call": call}, tmp_path)
    own = await direct(vllm_server, {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "prompt_logprobs": 0})
    steps = own["choices"][0]["prompt_logprobs"]
    expected = [next(iter(step.values())) for step in steps if step]  # the first token has none
    assert [t for t, _ in answer["logprobs"]] == [e["decoded_token"] for e in expected]
    assert sum(lp for _, lp in answer["logprobs"]) == pytest.approx(sum(e["logprob"] for e in expected))
    assert len(answer["logprobs"]) == own["usage"]["prompt_tokens"] - 1
    # streamed: the same prompt logprobs (vLLM streams them for an echo), the same text, nothing more
    assert [t for t, _ in answer["streamed"]] == [t for t, _ in answer["logprobs"]]
    assert [lp for _, lp in answer["streamed"]] == pytest.approx([lp for _, lp in answer["logprobs"]], rel=1e-5)
    assert answer["streamed_text"] == answer["text"]


async def test_features_a_target_does_not_list_are_refused_by_name(vllm_server: VLLM) -> None:
    target = {"provider": "vllm", "base_url": vllm_server.url}  # no extra_features
    cfg = parse_config({"auth": "none", "models": [{"name": "tiny", "targets": [target]}]})
    async with served(cfg) as url, aiohttp.ClientSession() as s:
        for field, value in (("bad_word_tokens", [{"tokens": [5]}]), ("stop_tokens", [{"tokens": [5, 6]}])):
            body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, field: value}
            async with s.post(url + "/serverless/v1/completions", json=body) as resp:
                text = await resp.text()
                assert resp.status == 400 and f"'{field}'" in text, text

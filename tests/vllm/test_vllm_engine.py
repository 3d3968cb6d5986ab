"""The in-process engine (provider ``vllm-engine``) against the real ``vllm serve`` of the same model.

``llm-gateway serve`` runs in vLLM's venv as its own process (``python -m gateway``: the engine
spawns its EngineCore, and ``--workers 1``), with an engine built from the same arguments as the
session's ``vllm_server``. Every check compares the gateway's greedy answers with the server's own,
so nothing here hard-codes what a random model says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.redis_servers import free_port
from tests.support import eventually_blocking
from tests.vllm.conftest import HERE
from tests.vllm.engine_stats import HANG_UP_TOKENS, assert_hang_ups_abort, idle, metric, ran_to_end
from tests.vllm.served import teams
from tests.vllm.server import ENV, MAX_MODEL_LEN, MODEL, READY_TIMEOUT, ROOT, VENV, VLLM, stop, tail
from tests.vllm.test_vllm import BEARER, GW, KEY, PROMPT, direct, repeated_ngrams

pytestmark = pytest.mark.vllm
TOKENS = [5, 17, 42, 99, 7, 61]  # a token-id prompt: no BOS, positions are exact
PLUGINS = ["no_repeat_ngram", "xtc", "forced_output_tokens", "max_total_tokens", "min_total_tokens"]
PLUGINS += ["bad_word_tokens", "stop_token_sequences"]
ENGINE = {  # what server.DEFAULT_ARGS gives `vllm serve`, plus prompt embeddings
    "model": str(MODEL),
    "dtype": "float32",
    "max_model_len": MAX_MODEL_LEN,
    "max_num_seqs": 4,
    "enforce_eager": True,
    "enable_prompt_embeds": True,
}


def gateway_config(port: int) -> dict[str, Any]:
    target = {"provider": "vllm-engine", "engine": ENGINE, "extra_features": PLUGINS}
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "models": [{"name": "tiny", "targets": [target]}],
        "teams": teams(KEY),
    }


def serve_command(config: Path, *extra: str) -> list[str]:
    return [str(VENV / "bin" / "python"), "-m", "gateway", "serve", "--config", str(config), *extra]


@pytest.fixture(scope="module")
def engine_gw(tmp_path_factory: pytest.TempPathFactory, vllm_server: VLLM) -> Iterator[VLLM]:
    """The gateway with the in-process engine, ready (its /ready answers 200). Started after
    ``vllm_server`` (which also builds the venv), so the two engines never start at once."""
    tmp = tmp_path_factory.mktemp("engine-gw")
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(yaml.safe_dump(gateway_config(port)))
    log = tmp / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            serve_command(config),
            cwd=ROOT,
            env={**os.environ, **ENV},  # ENV sets VLLM_USE_V2_MODEL_RUNNER=0 for the plugins
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"the gateway exited with {proc.returncode} before it was ready:\n{tail(log)}")
            try:
                with urllib.request.urlopen(base + "/ready", timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False  # not listening while the engine starts; 503 until the first probe

        # it imports vLLM, then starts the engine
        eventually_blocking(ready, f"the in-process engine's gateway ready (its log: {log})", within=2 * READY_TIMEOUT)
        print(f"gateway with the in-process engine ready in {time.monotonic() - began:.1f} s")
        yield VLLM(base, base + "/v1", MODEL, "tiny", log)
    finally:
        stop(proc)


@pytest.fixture
async def gw(engine_gw: VLLM) -> AsyncIterator[GW]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        yield GW(engine_gw.base, session)


@pytest.fixture(scope="module")
def embeddings(vllm_server: VLLM) -> list[list[float]]:
    """The model's input-embedding matrix, read by the vLLM venv's Python (this one has no torch)."""
    script = HERE / "embedding_rows.py"
    out = subprocess.run([str(VENV / "bin" / "python"), str(script), str(MODEL)], capture_output=True, check=True)
    return list(json.loads(out.stdout))


async def vllm_post(vllm: VLLM, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """The server's own answer (``data:`` chunks for a stream)."""
    async with aiohttp.ClientSession() as s, s.post(vllm.url + path, json={"model": vllm.model, **body}) as resp:
        raw = await resp.read()
        if resp.content_type == "text/event-stream":
            lines = raw.decode().split("\n")
            return resp.status, [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        return resp.status, json.loads(raw)


def streamed_text(chunks: list[Any], chat: bool = False) -> str:
    if chat:
        return "".join(c["delta"].get("content") or "" for ch in chunks for c in ch["choices"])
    return "".join(c["text"] for ch in chunks for c in ch["choices"])


def same_logprobs(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert mine["tokens"] == theirs["tokens"]
    assert mine["token_logprobs"] == pytest.approx(theirs["token_logprobs"], rel=1e-4)
    assert [sorted(t) for t in mine["top_logprobs"]] == [sorted(t) for t in theirs["top_logprobs"]]


# 1. completions and chat, whole and streamed


async def test_completions_match_vllm_whole_and_streamed(gw: GW, vllm_server: VLLM) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 16, "temperature": 0, "logprobs": 2}
    status, mine = await gw.post("/v1/completions", body)
    assert status == 200, mine
    _, theirs = await vllm_post(vllm_server, "/completions", body)
    (m,), (t,) = mine["choices"], theirs["choices"]
    assert m["text"] == t["text"] and m["finish_reason"] == t["finish_reason"]
    same_logprobs(m["logprobs"], t["logprobs"])
    assert mine["usage"] == {k: theirs["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}

    stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
    status, chunks = await gw.post("/v1/completions", stream)
    assert status == 200
    _, their_chunks = await vllm_post(vllm_server, "/completions", stream)
    assert streamed_text(chunks) == streamed_text(their_chunks) == t["text"]
    assert chunks[-1]["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"]

    batch = {"model": "tiny", "prompt": [PROMPT, "hello world"], "max_tokens": 8, "temperature": 0}
    _, mine = await gw.post("/v1/completions", batch)
    _, theirs = await vllm_post(vllm_server, "/completions", batch)
    assert [(c["index"], c["text"]) for c in mine["choices"]] == [(c["index"], c["text"]) for c in theirs["choices"]]


async def test_output_token_ids_match_vllm(gw: GW, vllm_server: VLLM) -> None:
    """Friendli's dialect returns the output token ids: the same ids vLLM samples."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    status, mine = await gw.post("/serverless/v1/completions", body)
    assert status == 200, mine
    theirs = await direct(vllm_server, {**body, "return_token_ids": True})
    assert mine["choices"][0]["tokens"] == theirs["choices"][0]["token_ids"]
    status, chunks = await gw.post("/serverless/v1/completions", {**body, "stream": True})
    assert status == 200
    assert streamed_text(chunks) == theirs["choices"][0]["text"]


async def test_chat_matches_vllm_whole_and_streamed(gw: GW, vllm_server: VLLM) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    body = {"model": "tiny", "messages": messages, "max_tokens": 12, "temperature": 0}
    status, mine = await gw.post("/v1/chat/completions", {**body, "logprobs": True, "top_logprobs": 2})
    assert status == 200, mine
    _, theirs = await vllm_post(vllm_server, "/chat/completions", {**body, "logprobs": True, "top_logprobs": 2})
    (m,), (t,) = mine["choices"], theirs["choices"]
    assert m["message"]["role"] == t["message"]["role"] == "assistant"
    assert m["message"]["content"] == t["message"]["content"] and m["finish_reason"] == t["finish_reason"]
    assert mine["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]  # the same chat template
    mine_lp, their_lp = m["logprobs"]["content"], t["logprobs"]["content"]
    assert [x["token"] for x in mine_lp] == [x["token"] for x in their_lp]
    assert [x["logprob"] for x in mine_lp] == pytest.approx([x["logprob"] for x in their_lp], rel=1e-4)
    assert [[y["token"] for y in x["top_logprobs"]] for x in mine_lp] == [
        [y["token"] for y in x["top_logprobs"]] for x in their_lp
    ]

    status, chunks = await gw.post("/v1/chat/completions", {**body, "stream": True})
    assert status == 200
    _, their_chunks = await vllm_post(vllm_server, "/chat/completions", {**body, "stream": True})
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert streamed_text(chunks, chat=True) == streamed_text(their_chunks, chat=True) == t["message"]["content"]


async def test_echo_matches_vllm(gw: GW, vllm_server: VLLM) -> None:
    """OpenAI's echo: the prompt, then the answer (vLLM drops the prompt text when asked for token ids,
    which the HTTP provider always asks; in-process the text is whole)."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "echo": True}
    status, mine = await gw.post("/v1/completions", body)
    assert status == 200, mine
    theirs = await direct(vllm_server, body)
    assert mine["choices"][0]["text"] == theirs["choices"][0]["text"]
    assert mine["choices"][0]["text"].startswith(PROMPT)


# 2. token-id prompts


async def test_token_prompts_match_vllm(gw: GW, vllm_server: VLLM) -> None:
    theirs = await direct(
        vllm_server, {"model": "tiny", "prompt": TOKENS, "max_tokens": 10, "temperature": 0, "return_token_ids": True}
    )
    (t,) = theirs["choices"]
    status, mine = await gw.post(
        "/serverless/v1/completions", {"model": "tiny", "tokens": TOKENS, "max_tokens": 10, "temperature": 0}
    )
    assert status == 200, mine
    assert mine["choices"][0]["tokens"] == t["token_ids"] and mine["choices"][0]["text"] == t["text"]
    assert mine["usage"]["prompt_tokens"] == len(TOKENS)
    openai_body = {"model": "tiny", "prompt": TOKENS, "max_tokens": 10, "temperature": 0}
    _, openai = await gw.post("/v1/completions", openai_body)
    assert openai["choices"][0]["text"] == t["text"]


# 3. Friendli's embedding replacement


async def replaced(gw: GW, body: dict[str, Any], positions: list[int], rows: list[list[float]]) -> Any:
    flat = [v for row in rows for v in row]
    status, out = await gw.post(
        "/serverless/v1/completions", {**body, "token_index_to_replace": positions, "embedding_to_replace": flat}
    )
    assert status == 200, out
    return out["choices"][0]["tokens"]


async def test_replacing_with_the_same_embedding_changes_nothing(
    gw: GW, vllm_server: VLLM, embeddings: list[list[float]]
) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    theirs = await direct(vllm_server, {**body, "return_token_ids": True})
    prompt_ids, expected = theirs["choices"][0]["prompt_token_ids"], theirs["choices"][0]["token_ids"]
    assert len(prompt_ids) > 3
    for k in (0, 2, len(prompt_ids) - 1):  # BOS, inside, the last position
        assert await replaced(gw, body, [k], [embeddings[prompt_ids[k]]]) == expected, k


async def test_replacing_with_another_tokens_embedding_is_that_token(
    gw: GW, vllm_server: VLLM, embeddings: list[list[float]]
) -> None:
    body = {"model": "tiny", "tokens": TOKENS, "max_tokens": 12, "temperature": 0}

    async def vllm_ids(prompt: list[int]) -> list[int]:
        asked = {"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0, "return_token_ids": True}
        out = await direct(vllm_server, asked)
        return list(out["choices"][0]["token_ids"])

    plain = await vllm_ids(TOKENS)
    k, t = 3, 250
    swapped = list(TOKENS)
    swapped[k] = t
    expected = await vllm_ids(swapped)
    assert expected != plain, "precondition: the substitution changes vLLM's greedy output"
    assert await replaced(gw, body, [k], [embeddings[t]]) == expected
    # two positions: the rows are taken in the order of the positions
    (k1, t1), (k2, t2) = (1, 300), (4, 11)
    both = list(TOKENS)
    both[k1], both[k2] = t1, t2
    assert await replaced(gw, body, [k1, k2], [embeddings[t1], embeddings[t2]]) == await vllm_ids(both)


async def test_embedding_replacement_refusals_name_the_field(gw: GW, embeddings: list[list[float]]) -> None:
    body = {"model": "tiny", "tokens": TOKENS, "max_tokens": 4}
    short = {**body, "token_index_to_replace": [1], "embedding_to_replace": embeddings[9][:-1]}
    status, out = await gw.post("/serverless/v1/completions", short)
    assert status == 400 and out["error"]["param"] == "embedding_to_replace", out
    assert "128" in out["message"]  # the model's hidden size is said
    outside = {**body, "token_index_to_replace": [len(TOKENS)], "embedding_to_replace": embeddings[9]}
    status, out = await gw.post("/serverless/v1/completions", outside)
    assert status == 400 and out["error"]["param"] == "token_index_to_replace", out


# 4. this project's logits-processor plugins, loaded by the in-process engine through entry points


async def test_plugin_samplers_work_in_process_as_over_http(gw: GW, vllm_server: VLLM) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 48, "min_tokens": 48, "temperature": 0}
    _, plain = await gw.post("/serverless/v1/completions", body)
    assert repeated_ngrams(plain["choices"][0]["tokens"], 2) > 0, "the tiny model should repeat itself"
    status, blocked = await gw.post("/serverless/v1/completions", {**body, "no_repeat_ngram": 2})
    assert status == 200, blocked
    theirs = await direct(vllm_server, {**body, "return_token_ids": True, "vllm_xargs": {"no_repeat_ngram_size": 2}})
    assert blocked["choices"][0]["tokens"] == theirs["choices"][0]["token_ids"]
    assert repeated_ngrams(blocked["choices"][0]["tokens"], 2) == 0

    forced = [7, 8, 9]
    short = {"model": "tiny", "prompt": PROMPT, "max_tokens": 6, "temperature": 0}
    _, out = await gw.post("/serverless/v1/completions", {**short, "forced_output_tokens": forced})
    theirs = await direct(
        vllm_server, {**short, "return_token_ids": True, "vllm_xargs": {"forced_output_tokens": forced}}
    )
    assert out["choices"][0]["tokens"][:3] == forced
    assert out["choices"][0]["tokens"] == theirs["choices"][0]["token_ids"]


async def test_seed_fields_work_in_process_as_over_http(gw: GW, vllm_server: VLLM) -> None:
    """Friendli's token-sequence bans and stops, Friendli 2024 beam search and OctoAI's loglikelihood:
    the in-process engine gives what ``vllm serve`` gives (tests/vllm/test_vllm_seed_fields.py has them
    through the gateway with the vendors' SDKs)."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    _, plain = await gw.post("/serverless/v1/completions", body)
    tokens = plain["choices"][0]["tokens"]
    seqs = {"bad_word_tokens": [{"tokens": tokens[2:4]}], "stop_tokens": [{"tokens": tokens[5:7]}]}
    for field, value in seqs.items():
        status, mine = await gw.post("/serverless/v1/completions", {**body, field: value})
        assert status == 200, mine
        flat = {"bad_word_tokens": "bad_word_tokens", "stop_tokens": "stop_token_sequences"}[field]
        xargs = {flat: value[0]["tokens"]}
        theirs = (await direct(vllm_server, {**body, "return_token_ids": True, "vllm_xargs": xargs}))["choices"][0]
        if field == "stop_tokens":  # the end token the plugin forces after the sequence is taken out
            end = next(i + 2 for i in range(len(tokens)) if tokens[i : i + 2] == tokens[5:7])  # its first
            assert mine["choices"][0]["tokens"] == theirs["token_ids"][:-1] == tokens[:end]
            assert mine["usage"]["completion_tokens"] == end
        else:
            assert mine["choices"][0]["tokens"] == theirs["token_ids"] != tokens

    beam = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "timeout_microseconds": None, "num_beams": 3}
    own = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "n": 3, "use_beam_search": True, "temperature": 0}
    status, mine = await gw.post("/v1/completions", beam)  # the 2024 generation's keys: friendli-client
    assert status == 200, mine
    theirs = await direct(vllm_server, own)
    assert [c["text"] for c in mine["choices"]] == [theirs["choices"][0]["text"]]

    octo = {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "loglikelihood": True}
    status, mine = await gw.post("/v1/completions", octo, {**BEARER, "X-Fern-SDK-Name": "octoai"})
    assert status == 200, mine
    theirs = await direct(vllm_server, {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "prompt_logprobs": 0})
    expected = [next(iter(step.values())) for step in theirs["choices"][0]["prompt_logprobs"] if step]
    content = mine["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == [e["decoded_token"] for e in expected]
    assert [c["logprob"] for c in content] == pytest.approx([e["logprob"] for e in expected], rel=1e-4)
    status, chunks = await gw.post("/v1/completions", {**octo, "stream": True}, {**BEARER, "X-Fern-SDK-Name": "octoai"})
    assert status == 200, chunks
    streamed = [
        c for ch in chunks for choice in ch["choices"] for c in (choice.get("logprobs") or {}).get("content", [])
    ]
    assert [c["token"] for c in streamed] == [c["token"] for c in content]
    assert streamed_text(chunks) == mine["choices"][0]["text"]


# 5. hang-ups and deadlines free the engine


async def test_a_hang_up_aborts_the_engine_request(gw: GW, engine_gw: VLLM) -> None:
    # The client leaves after its first line (the engine is generating), asking for more tokens than the
    # engine can write before the hang-up lands (480 once were written in full, 871 ms, first).
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": HANG_UP_TOKENS, "ignore_eos": True}
    print(await assert_hang_ups_abort(gw.url + "/v1/completions", body, BEARER, [engine_gw]))
    started = time.monotonic()
    status, out = await gw.post("/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 4})
    assert status == 200 and out["usage"]["completion_tokens"] == 4
    print(f"next request in {time.monotonic() - started:.2f} s")


async def test_an_expired_deadline_aborts_the_engine_request(gw: GW, engine_gw: VLLM) -> None:
    await idle(engine_gw)
    finished = await ran_to_end(engine_gw)
    generated = await metric(engine_gw, "vllm:generation_tokens_total")
    n = HANG_UP_TOKENS  # seconds of the engine's work: only an abort ends it within the deadline's reach
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": n, "min_tokens": n, "timeout_microseconds": 300_000}
    began = time.monotonic()
    status, out = await gw.post("/serverless/v1/completions", body)
    assert status == 429 and out["error"]["code"] == "deadline_exceeded", out  # Friendli's answer to its timeout
    assert time.monotonic() - began < 5
    await idle(engine_gw, "the request aborted at its deadline")
    assert await ran_to_end(engine_gw) == finished
    assert await metric(engine_gw, "vllm:generation_tokens_total") - generated < n


# errors, and the one-worker rule


async def test_vllm_refusals_are_the_clients_400(gw: GW, vllm_server: VLLM) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": MAX_MODEL_LEN + 88}
    status, mine = await gw.post("/v1/completions", body)
    their_status, theirs = await vllm_post(vllm_server, "/completions", body)
    assert status == their_status == 400, mine
    assert mine["error"]["param"] == theirs["error"]["param"] == "max_tokens"
    assert mine["error"]["message"] == theirs["error"]["message"]


def test_serve_refuses_several_workers_with_an_in_process_engine(tmp_path: Path) -> None:
    """Refused by the CLI before anything imports vLLM, so this process's Python will do."""
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(gateway_config(free_port())))
    command = [sys.executable, *serve_command(config, "--workers", "2")[1:]]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "tiny/vllm-engine" in proc.stderr and "one worker" in proc.stderr

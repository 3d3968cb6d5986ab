"""A stream its client cuts is charged what it consumed, never the worst case reserved: the upstream's
own count where it reports one as it streams, else an upper bound of the text streamed, settled into
the Redis budget and the team's usage."""

from __future__ import annotations

import json
import uuid
from typing import Any

import aiohttp
import pytest

from gateway.runtime.config import parse_config
from tests.integration.conftest import GatewayFactory, target
from tests.integration.dialect_clients import BEARER, STREAMING
from tests.integration.spend_rig import (
    OPENAI,
    budget_spent,
    cost,
    settled,
    spend_config,
    spend_gateway,
)
from tests.support import eventually
from tests.support.redis_servers import RedisServer


async def hang_up_after(url: str, request: tuple[str, dict[str, str], Any], events: int, upstream: Any) -> int:
    """The client reads ``events`` data events of a stream and hangs up mid-stream; back once the
    gateway has closed the upstream's stream behind it. How many events it read."""
    path, headers, body = request
    received = 0
    async with aiohttp.ClientSession() as session, session.post(url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
        async for line in resp.content:
            received += line.startswith(b"data: {")
            if received == events:
                break
    await eventually(lambda: upstream.cancelled >= 1, "the gateway closed the upstream's stream behind it")
    return received


async def test_a_stream_cut_by_its_client_is_charged_what_it_consumed(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    server, team, gw = await spend_gateway(gateway, upstream, redis_server.url, budget={"amount": "1"})
    request = OPENAI.request("m", "alpha beta gamma [[fault:slow=0.3]]", True, max_tokens=50)
    received = await hang_up_after(gw.url, request, 2, server)
    usage = await settled(redis_server.url, team, 1)
    assert received <= usage["completion_tokens"] < 50  # at least what was streamed; not the worst case
    assert usage["spend"] == cost(usage["prompt_tokens"], usage["completion_tokens"]) > 0
    assert await budget_spent(redis_server.url, team) == usage["spend"]  # the worst case is given back


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_cut_stream_is_charged_an_upper_bound_of_its_text(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer, provider: str
) -> None:
    """A stream cut before its usage is settled by the most its texts can hold (a token a byte, as the
    prompt's bound), never a token a chunk: here the upstream counts a token a byte (``dense_answer``)
    and sends a word a chunk. OpenAI's chunks are relayed as they came (no usage in them); Anthropic's
    are decoded, and its count as of the cut is its first event's."""
    server = await upstream(provider)
    team = f"t-{uuid.uuid4().hex[:8]}"
    data = spend_config(server, redis_server.url, team, budget={"amount": "1"})
    data["models"][0]["targets"][0] = target(server, provider, name="up")
    gw = await gateway(parse_config(data))
    _, headers, _ = OPENAI.request("m", "x", True)
    question = [{"role": "user", "content": "alpha beta gamma [[fault:slow=0.3,dense_answer]]"}]
    body = {"model": "m", "messages": question, "stream": True, "max_tokens": 200}
    texts: list[str] = []
    async with (
        aiohttp.ClientSession() as session,
        session.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as resp,
    ):
        assert resp.status == 200
        async for line in resp.content:
            if line.startswith(b"data: {") and (choices := json.loads(line[6:])["choices"]):
                texts.append(choices[0]["delta"].get("content") or "")
            if len(texts) == 4:
                break
    await eventually(lambda: server.cancelled >= 1, "the gateway closed the upstream's stream behind it")
    usage = await settled(redis_server.url, team, 1)
    consumed = sum(len(t.encode()) for t in texts)  # the upstream's count of what the client received
    assert len(texts) < consumed <= usage["completion_tokens"] < 200, (texts, usage)
    assert usage["spend"] == cost(usage["prompt_tokens"], usage["completion_tokens"])
    assert await budget_spent(redis_server.url, team) == usage["spend"]


@pytest.mark.parametrize("decoded", [True, False])
async def test_a_cut_stream_is_settled_by_the_upstreams_own_count_where_it_reports_one(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer, decoded: bool
) -> None:
    """A vLLM target streaming chunks the gateway decodes (here: logprobs asked) is asked for usage on
    every chunk, so a stream its client cuts is settled by vLLM's count as of the last chunk read:
    the prompt's real tokens, not its estimate. Relayed chunks (no logprobs) are not (they would all
    have to be decoded): the fallback settles the prompt's estimate and the most the texts streamed
    can hold."""
    server = await upstream("vllm")
    team = f"t-{uuid.uuid4().hex[:8]}"
    data = spend_config(server, redis_server.url, team, budget={"amount": "1"})
    data["models"][0]["targets"][0]["provider"] = "vllm"
    gw = await gateway(parse_config(data))
    prompt, fields = "alpha beta gamma [[fault:slow=0.3]]", {"logprobs": 1} if decoded else {}
    whole = await gw.send(OPENAI, "m", prompt, False, max_tokens=50, **fields)
    assert whole.status == 200
    real = whole.usage["prompt_tokens"]  # the upstream's count of this prompt
    await hang_up_after(gw.url, OPENAI.request("m", prompt, True, max_tokens=50, **fields), 3, server)
    asked = server.requests[-1].body["stream_options"]
    assert asked.get("continuous_usage_stats", False) is decoded
    usage = await settled(redis_server.url, team, 2)
    prompt_tokens, completion = (
        usage["prompt_tokens"] - real,
        usage["completion_tokens"] - whole.usage["completion_tokens"],
    )
    if decoded:
        assert prompt_tokens == real  # vLLM's count, as of the last chunk read
        assert 2 <= completion < whole.usage["completion_tokens"]  # at least what was streamed; cut short
    else:  # upper bounds: the prompt's, and the most the texts streamed can hold
        assert prompt_tokens > real
        assert 2 <= completion < 50
    assert (
        usage["spend"]
        == cost(usage["prompt_tokens"], usage["completion_tokens"])
        == await budget_spent(redis_server.url, team)
    )


async def test_a_resumed_stream_cut_by_its_client_charges_the_tokens_sent_once(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    """A stream breaks after 3 tokens and continues on another vLLM target, whose continuation takes
    them as prompt; the client (Anthropic's Messages: decoded, so vLLM counts as it goes) hangs up
    mid-continuation. The cut stream is settled by the continuation's count, with the tokens sent
    moved back to the completion, as its usage report does: the prompt's real count, not it and the
    3 tokens again (9 for 6 before). An answer broken after more tokens than the prompt's bound has
    to spare was charged past the worst case a hard budget reserved for it."""
    broken = await upstream("vllm", faults="[[fault:reset_after=3]]")
    slow = await upstream("vllm", faults="[[fault:hang_between=0.2]]")
    team = f"t-{uuid.uuid4().hex[:8]}"
    data = spend_config(broken, redis_server.url, team, budget={"amount": "1"})
    timeouts = {"connect": 1, "first_byte": 5, "idle": 0.5, "total": 30}
    data["models"][0]["targets"] = [
        target(broken, "vllm", name="up", weight=1e6, timeouts=timeouts),
        target(slow, "vllm", name="up2", weight=1e-6),
    ]
    gw = await gateway(parse_config(data))
    messages = next(i for i in STREAMING if i.name == "anthropic")
    whole = await gw.send(messages, "m", "tell me a story", True, max_tokens=16, temperature=0)
    assert whole.status == 200 and whole.usage is not None, whole.raw
    real = (await settled(redis_server.url, team, 1))["prompt_tokens"]  # resumed whole: its report's count
    path, headers, body = messages.request("m", "tell me a story", True, max_tokens=16, temperature=0)
    async with aiohttp.ClientSession() as session, session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
        deltas = 0
        async for line in resp.content:
            deltas += b'"text_delta"' in line
            if deltas == 5:  # 3 from the broken target, 2 from the continuation
                break
    await eventually(lambda: slow.cancelled >= 1, "the gateway closed the continuation behind the client")
    asked = slow.requests[-1].body
    assert asked["stream_options"].get("continuous_usage_stats") and len(asked["prompt"]) > real, asked
    usage = await settled(redis_server.url, team, 2)
    assert usage["prompt_tokens"] - real == real  # its prompt once, not with the 3 tokens sent
    assert usage["spend"] == cost(usage["prompt_tokens"], usage["completion_tokens"])
    assert await budget_spent(redis_server.url, team) == usage["spend"]


async def test_a_fanned_out_stream_cut_by_its_client_is_charged_every_call_s_prompt(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    """Friendli's per-choice seeds fanned out to a vLLM target: 4 calls, each billing the prompt. Cut by
    its client, the stream is settled by vLLM's own counts (decoded chunks: usage on each), all 4 of
    them; it was settled by the last call closed alone, a quarter of the prompt billed."""
    server = await upstream("vllm")
    team = f"t-{uuid.uuid4().hex[:8]}"
    data = spend_config(server, redis_server.url, team, budget={"amount": "1"})
    data["models"][0]["targets"] = [target(server, "vllm", name="up")]
    gw = await gateway(parse_config(data))
    body = {"model": "m", "prompt": "alpha beta gamma [[fault:slow=0.3]]", "max_tokens": 20, "n": 4}
    body |= {"seed": [1, 2, 3, 4], "stream": True}
    async with gw.session.post(gw.url + "/serverless/v1/completions", json=body, headers=BEARER) as resp:
        assert resp.status == 200
        await resp.read()
    whole = await settled(redis_server.url, team, 1)
    request = ("/serverless/v1/completions", BEARER, body)
    await hang_up_after(gw.url, request, 8, server)
    await eventually(lambda: server.cancelled >= 4, "every call closed behind the client")
    asked = server.requests[-1].body["stream_options"]
    assert asked.get("continuous_usage_stats"), asked
    usage = await settled(redis_server.url, team, 2)
    assert usage["prompt_tokens"] == 2 * whole["prompt_tokens"]  # 4 calls' prompts, as the whole one's
    assert usage["spend"] == cost(usage["prompt_tokens"], usage["completion_tokens"])
    assert await budget_spent(redis_server.url, team) == usage["spend"]


async def test_a_fanned_out_answer_with_a_failed_call_is_charged_the_calls_that_answered(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    """Friendli's per-choice seeds fanned out to a vLLM target, not streamed: 4 calls, the first to
    arrive answered 500. The client gets the error, and the 3 calls that answered are charged what
    they reported (they were charged nothing: the merged usage was lost with the error)."""
    server = await upstream("vllm")
    team = f"t-{uuid.uuid4().hex[:8]}"
    data = spend_config(server, redis_server.url, team, budget={"amount": "1"})
    data["models"][0]["targets"] = [target(server, "vllm", name="up")]
    gw = await gateway(parse_config(data))
    body = {"model": "m", "prompt": "alpha beta gamma", "max_tokens": 20, "n": 4, "seed": [1, 2, 3, 4]}
    async with gw.session.post(gw.url + "/serverless/v1/completions", json=body, headers=BEARER) as resp:
        assert resp.status == 200
        whole = (await resp.json())["usage"]
    await settled(redis_server.url, team, 1)
    body["prompt"] = "alpha beta gamma [[fault:once:status=500]]"
    async with gw.session.post(gw.url + "/serverless/v1/completions", json=body, headers=BEARER) as resp:
        assert resp.status >= 500
    usage = await settled(redis_server.url, team, 2)
    assert len(server.requests) == 8  # the second request's 4 calls, the one refused among them
    assert usage["spend"] == cost(usage["prompt_tokens"], usage["completion_tokens"])

    async def reserved_ahead_given_back() -> bool:  # back-to-back requests: units admitted ahead
        return await budget_spent(redis_server.url, team) == usage["spend"]

    await eventually(reserved_ahead_given_back, "the budget's sum down to what was settled")
    async with gw.session.post(gw.url + "/serverless/v1/completions", json=body, headers=BEARER) as resp:
        assert resp.status == 200  # the marker fired once: all 4 calls answer
        again = (await resp.json())["usage"]
    assert usage["prompt_tokens"] - whole["prompt_tokens"] == again["prompt_tokens"] // 4 * 3  # the 3 that answered
    assert usage["completion_tokens"] > whole["completion_tokens"]

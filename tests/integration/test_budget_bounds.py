"""A hard budget's worst case bounds what its requests can cost, whatever the client leaves out: an
answer with no ``max_tokens`` (a target's own default is the rest of its context, vLLM's), an answer
whose prompt the target writes to its prompt cache at a dearer price than it reads it, and Redis
failing open with most of the budget already spent. Checked on a real Redis by exact sums: the
budget's spend never passes its amount."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.limits.admission import running
from gateway.runtime.config import parse_config
from tests.integration.conftest import GatewayFactory, completions_server, target
from tests.integration.dialect_clients import BEARER
from tests.integration.spend_rig import budget_spent, outage_admission, settled, spend_config, team_ask
from tests.support.redis_servers import RedisServer


async def usage_of(gw: Any, path: str, body: dict[str, Any]) -> tuple[int, dict[str, int] | None]:
    """The status and the usage of one answer, whole or streamed (its usage chunk or event)."""
    async with gw.session.post(gw.url + path, json=body, headers=BEARER) as resp:
        if resp.status != 200 or not body.get("stream"):
            return resp.status, (await resp.json()).get("usage") if resp.status == 200 else None
        usage = None
        async for line in resp.content:
            if line.startswith(b"data: {") and b'"usage"' in line:
                event = json.loads(line[6:])
                usage = event.get("usage") or (event.get("response") or {}).get("usage") or usage
        return resp.status, usage


WITHOUT_MAX = {  # one request of each dialect that may leave the answer's length to the target
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "alpha beta gamma"}]}),
    "chat-stream": (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "alpha beta gamma"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
}


@pytest.mark.parametrize("kind", list(WITHOUT_MAX))
@pytest.mark.parametrize("unit", ["tokens", "amount"])
async def test_an_answer_without_max_tokens_is_held_to_the_worst_case_reserved(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer, unit: str, kind: str
) -> None:
    """No ``max_tokens``: the reservation counts ``DEFAULT_MAX_TOKENS_ESTIMATE`` completion tokens, so
    the target is sent that bound; else a vLLM target writes to the end of its context (``ignore_eos``
    keeps the fake from stopping early, as a long answer would) and one answer passes the budget."""
    server = await upstream("vllm")
    team = f"t-{uuid.uuid4().hex[:8]}"
    budget = {"tokens": 1500} if unit == "tokens" else {"amount": "0.05"}  # 0.05 EUR: ~1,500 tokens
    cfg = spend_config(server, redis_server.url, team, budget=budget | {"period": "day"})
    cfg["models"][0]["targets"] = [target(server, "vllm", name="up")]
    gw = await gateway(parse_config(cfg))
    path, body = WITHOUT_MAX[kind]
    answered = []
    for _ in range(3):
        status, usage = await usage_of(gw, path, {"model": "m", "ignore_eos": True, **body})
        assert status in (200, 429), status
        if status == 200:
            assert usage is not None
            answered.append(usage)
    assert answered
    await settled(redis_server.url, team, len(answered))
    limit = 1500 if unit == "tokens" else 50_000
    assert await budget_spent(redis_server.url, team, "t" if unit == "tokens" else "m") <= limit, answered


@pytest.mark.parametrize(
    ("kind", "path", "body", "field"),
    [
        ("anthropic", "/v1/chat/completions", {"messages": [{"role": "user", "content": "alpha"}]}, "max_tokens"),
        ("openai", "/v1/responses", {"input": "alpha", "store": False}, "max_output_tokens"),
        (
            "vllm",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "min_tokens": 700},
            "max_tokens",
        ),
    ],
)
async def test_every_target_is_sent_the_bound_a_hard_budget_reserved(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer, kind: str, path: str, body: Any, field: str
) -> None:
    """Without the client's bound, each target is sent the one the worst case counted, in its own
    field: an Anthropic target's default would be 4,096 (``anthropic/egress``), a native Responses
    body goes as it came; never less than the client's ``min_tokens``. A soft budget sends none."""
    server = await upstream(kind)
    for mode, sent in (("hard", 700 if "min_tokens" in body else 512), ("soft", None)):
        team = f"t-{uuid.uuid4().hex[:8]}"
        cfg = spend_config(server, redis_server.url, team, budget={"tokens": 10**6, "mode": mode})
        cfg["models"][0]["targets"] = [target(server, kind, name="up")]
        gw = await gateway(parse_config(cfg))
        status, _ = await usage_of(gw, path, {"model": "m", **body})
        assert status == 200, (mode, server.requests[-1].body if server.requests else None)
        default = 4096 if kind == "anthropic" else None  # the Anthropic wire requires one
        assert server.requests[-1].body.get(field) == (sent or default), (mode, server.requests[-1].body)


async def test_failing_open_a_budget_starts_from_what_redis_last_said_was_spent(own_redis: RedisServer) -> None:
    """``spend.on_failure: open`` admits against this process's share of what is left of a budget, as
    Redis last answered it: not of the whole amount from zero, which let an outage near the end of a
    month admit another whole budget (per replica) past a hard one."""
    server = own_redis
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("alpha",), sampling=Sampling(max_tokens=20))
    ask = team_ask(request)
    amount = Decimal("0.003")  # 3000 millionths; a worst case is 670, an answer of 3 + 20 tokens 630
    async with outage_admission(server.url, "open", amount) as (admission, limiter), running(admission):
        for n in range(1, 5):  # 2520 spent: Redis refuses the next worst case
            admission.release(await admission.admit(ask), 3, 20, 0, "m", "up")
            await settled(server.url, "a", n)
        server.stop()
        admitted = 0
        for _ in range(5):
            try:
                plan = await admission.admit(ask)
            except GatewayError as refused:
                assert refused.status == 429, refused
                break
            admitted += 1
            admission.release(plan, 3, 20, 0, "m", "up")
        assert not limiter.up
        assert 2520 + admitted * 630 <= 3000, f"{admitted} admitted past what Redis said was left"


async def answer_without_usage(request: web.Request) -> web.Response:
    """A whole completion with no ``usage``: some OpenAI-compatible servers leave it out."""
    body = await request.json()
    text = " word" * 10
    choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
    return web.json_response(
        {"id": "c", "object": "text_completion", "created": 1, "model": body["model"], "choices": [choice]}
    )


async def test_an_answer_without_usage_is_charged_an_upper_bound_not_nothing(
    gateway: GatewayFactory, redis_server: RedisServer
) -> None:
    """A whole answer the target reports no usage for is charged the upper bounds a cut stream is (the
    prompt's, and its text's), never 0: else every such answer is free and a hard budget never
    refuses."""
    async with completions_server(answer_without_usage) as server:
        team = f"t-{uuid.uuid4().hex[:8]}"
        up = SimpleNamespace(url=str(server.make_url("/v1")))
        cfg = spend_config(up, redis_server.url, team, budget={"tokens": 200, "period": "day"})
        gw = await gateway(parse_config(cfg))
        statuses = []
        for _ in range(10):
            status, _ = await usage_of(gw, "/v1/completions", {"model": "m", "prompt": "alpha", "max_tokens": 20})
            statuses.append(status)
        assert statuses[0] == 200
        await settled(redis_server.url, team, statuses.count(200))
        spent = await budget_spent(redis_server.url, team, "t")
        assert spent >= statuses.count(200) * 11, (statuses, spent)  # at least the text's tokens each
        assert spent <= 200 and 429 in statuses, (statuses, spent)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_seed_list_fanned_out_reserves_its_prompt_once_a_call(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer, stream: bool
) -> None:
    """Friendli's per-choice seeds go to a target taking one seed as a call per seed
    (``gateway.routing.fanout``), and each call's usage counts the whole prompt: 4 seeds bill it 4
    times. The worst case reserved counts it so; it counted it once, and two requests of a 418-byte
    token-dense prompt settled 3,344 tokens of a 3,000-token hard budget."""
    server = await upstream("vllm")
    team = f"t-{uuid.uuid4().hex[:8]}"
    cfg = spend_config(server, redis_server.url, team, budget={"tokens": 3000, "period": "day"})
    cfg["models"][0]["targets"] = [target(server, "vllm", name="up")]
    gw = await gateway(parse_config(cfg))
    body = {"model": "m", "prompt": "x" * 400 + " [[fault:dense]]", "max_tokens": 1, "n": 4, "seed": [1, 2, 3, 4]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    answered = []
    for _ in range(2):
        status, usage = await usage_of(gw, "/serverless/v1/completions", body)
        assert status in (200, 429), status
        if status == 200:
            assert usage is not None and usage["prompt_tokens"] > 4 * 400, usage  # billed once a call
            answered.append(usage)
    assert len(answered) == 1
    await settled(redis_server.url, team, 1)
    assert await budget_spent(redis_server.url, team, "t") == answered[0]["total_tokens"] <= 3000

"""Spend against a real Redis: budgets that hold exactly across three gateway processes, refusals in
each client's dialect naming the budget and its reset, soft budgets, a stream cut by its client charged
what it consumed, and the spend report checked against the request log."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml

from gateway.core.errors import GatewayError
from gateway.core.request import InternalRequest, Operation, Sampling
from gateway.core.upstream import Upstream
from gateway.limits.admission import Admission, Ask, Settings, TeamPolicy, running
from gateway.limits.budget_rules import calendar, iso, rules
from gateway.limits.costs import Spend
from gateway.limits.failover import FailoverLimiter
from gateway.limits.limiter import LimitsUnavailable
from gateway.limits.local import LocalLimiter
from gateway.limits.plan import LimitValues, new_lease, planned, tag
from gateway.limits.plan import layout as plan_layout
from gateway.limits.prices import PriceTable
from gateway.limits.store import RedisLimiter
from gateway.runtime.config import RedisConfig, hash_key, parse_config
from gateway.runtime.spend_config import Budget, Price, SpendSettings
from gateway.store.redis_client import redis_client
from tests.integration.conftest import UPSTREAM_KEY_ENV, GatewayFactory, target
from tests.integration.dialect_clients import BY_NAME, INGRESSES, KEY, without_team
from tests.support import eventually
from tests.support.gateways import Gateways, Served
from tests.support.redis_servers import RedisCluster, RedisServer

OPENAI = BY_NAME["openai"]
ADMIN = "admin-key-for-spend"
ZONE = "Europe/Paris"
IN, OUT = 10, 30  # prices per million tokens: 10 and 30 millionths of a EUR per token
LOCAL_JSON = ("--host", "127.0.0.1", "--log-format", "json")
PROMPTS = ["alpha beta gamma", "count these words please", "one two three four five six", "spend"]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()


def spend_config(
    server: Any, redis_url: str | None, team: str, cluster: bool = False, **team_cfg: Any
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "models": [
            {"name": "m", "targets": [target(server, "openai", name="up")]},
            {"name": "free", "targets": [target(server, "openai", name="free-up")]},  # no price
        ],
        "teams": [{"id": team, "keys": [{"id": "k1", "sha256": hash_key(KEY)}], **team_cfg}],
        "spend": {"currency": "EUR", "time_zone": ZONE, "prices": [{"model": "m", "input": IN, "output": OUT}]},
        "admin": {"key_sha256": hash_key(ADMIN)},
    }
    if redis_url is not None:
        data["redis"] = {"url": redis_url, "timeout_ms": 1000, "cluster": cluster}
    return data


def cost(prompt: int, completion: int) -> int:
    return prompt * IN + completion * OUT


async def settled(url: str, team: str, requests: int) -> dict[str, int]:
    """The team's usage hash once ``requests`` requests are settled in it (settling follows the answer)."""
    client = aioredis.Redis.from_url(url)

    async def usage() -> dict[str, int]:
        fields: dict[str, int] = {}
        async for key in client.scan_iter(match=f"{tag(team)}:usage:*"):
            for k, v in (await client.hgetall(key)).items():
                fields[k.decode()] = fields.get(k.decode(), 0) + int(v)
        return fields if fields.get("requests", 0) >= requests else {}

    try:
        return await eventually(usage, f"{requests} requests settled in team {team}'s usage")
    finally:
        await client.aclose()


async def budget_spent(url: str, team: str, unit: str = "m") -> int:
    client = aioredis.Redis.from_url(url)
    fields = {k.decode(): int(v) for k, v in (await client.hgetall(f"{tag(team)}:budget")).items()}
    await client.aclose()
    return sum(v for k, v in fields.items() if k.endswith(f":{unit}"))


async def spend_gateway(
    gateway: GatewayFactory, upstream: Any, redis_url: str | None, cluster: bool = False, **team_cfg: Any
) -> Any:
    """A fake upstream, a fresh team id (fresh budgets in a shared Redis) and a gateway in front."""
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    return server, team, await gateway(parse_config(spend_config(server, redis_url, team, cluster, **team_cfg)))


@pytest.mark.parametrize("backend", ["redis", "local"])
async def test_a_refusal_names_the_budget_and_its_reset_in_every_dialect(
    gateway: GatewayFactory, upstream: Any, request: pytest.FixtureRequest, backend: str
) -> None:
    url = request.getfixturevalue("redis_server").url if backend == "redis" else None
    server, _, gw = await spend_gateway(gateway, upstream, url, budget={"amount": "0.004"})
    month_end = iso(calendar("month", ZoneInfo(ZONE), time.time())[1], ZoneInfo(ZONE))
    assert (await gw.send(OPENAI, "m", "x", False, max_tokens=10)).status == 200  # holds up to 0.00033 EUR
    for ingress in INGRESSES:  # a worst case of 0.00393 EUR: within the budget, not within what is left
        answer = await gw.send(without_team(ingress), "m", "x", False, max_tokens=130)
        assert answer.status == 429, (ingress.name, answer.raw)
        assert b"budget of 0.004000 EUR per month" in answer.raw and month_end.encode() in answer.raw, answer.raw
    path, headers, body = without_team(OPENAI).request("m", "x", False, max_tokens=130)
    async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 429
        assert resp.headers["X-Budget-Reset"] == month_end
        assert Decimal("0.00367") <= Decimal(resp.headers["X-Budget-Remaining"]) < Decimal("0.00393")
        assert int(resp.headers["Retry-After"]) >= 1
        assert (await resp.json())["error"]["type"] == "rate_limit_error"
    never = await gw.send(OPENAI, "m", "x", False, max_tokens=1000)  # "x": 3 prompt tokens at most (a BOS, a byte, a ▁)
    assert never.status == 429 and b"worst case (0.030030 EUR) exceeds the team's whole budget" in never.raw
    ok = await gw.send(OPENAI, "m", "x", False, max_tokens=10)  # worst case 0.00033 EUR: fits
    assert ok.status == 200
    assert len(server.requests) == 2  # nothing refused reached the upstream


async def test_a_soft_budget_admits_and_says_so(
    gateway: GatewayFactory, upstream: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """In process (no Redis): a soft token budget admits past its amount, and says so."""
    _, team, gw = await spend_gateway(gateway, upstream, None, budget={"tokens": 30, "period": "day", "mode": "soft"})
    exceeded = []
    caplog.set_level(logging.WARNING, "gateway.limits")
    for _ in range(4):
        path, headers, body = OPENAI.request("m", "alpha beta", False, max_tokens=10)
        async with gw.session.post(gw.url + path, json=body, headers=headers) as resp:
            assert resp.status == 200
            exceeded.append(resp.headers.get("X-Budget-Exceeded"))
    assert exceeded[0] is None and exceeded[-1] == "team"
    said = [r.getMessage() for r in caplog.records if "soft budget" in r.getMessage()]
    assert said == [
        f"team {team!r}: its team soft budget of 30 tokens per day is exceeded; requests are still admitted"
    ]
    assert (await gw.send(OPENAI, "free", "x", False)).status == 200
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with gw.session.get(gw.url + "/status", headers=admin) as resp:
        page = await resp.text()
    row = f"<tr><td>{team}</td><td>30 tokens</td><td>per day</td><td>soft</td>"
    assert row in page and "Not counted, no price: free on free-up" in page, page
    async with gw.session.get(gw.url + "/admin/spend?group_by=model&period=day", headers=admin) as resp:
        report = await resp.json()
    assert report["unpriced"] == [{"model": "free", "target": "free-up"}]
    assert [r["model"] for r in report["rows"]] == ["m"] and report["rows"][0]["spend_micros"] > 0


async def test_a_stream_cut_by_its_client_is_charged_what_it_consumed(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    server, team, gw = await spend_gateway(gateway, upstream, redis_server.url, budget={"amount": "1"})
    path, headers, body = OPENAI.request("m", "alpha beta gamma [[fault:slow=0.3]]", True, max_tokens=50)
    received = 0
    async with aiohttp.ClientSession() as session, session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
        async for line in resp.content:
            received += line.startswith(b"data: {")
            if received == 2:
                break  # the client hangs up mid-stream
    await eventually(lambda: server.cancelled >= 1, "the gateway closed the upstream's stream behind it")
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
    path, headers, body = OPENAI.request("m", prompt, True, max_tokens=50, **fields)
    received = 0
    async with aiohttp.ClientSession() as session, session.post(gw.url + path, json=body, headers=headers) as resp:
        assert resp.status == 200
        async for line in resp.content:
            received += line.startswith(b"data: {")
            if received == 3:
                break  # the client hangs up mid-stream
    await eventually(lambda: server.cancelled >= 1, "the gateway closed the upstream's stream behind it")
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


@pytest.fixture
async def processes(gateways: Gateways) -> Any:
    """The old launcher's face over ``gateways``, while other tests use it: ``await processes(cfg)`` is
    a served gateway's URL, ``processes.procs`` its (process, log) pairs, ``processes.stop()`` their
    request log lines."""
    started: list[Served] = []

    async def start(cfg: Path) -> str:
        started.append(await gateways.start("--config", str(cfg), *LOCAL_JSON, env={UPSTREAM_KEY_ENV: "upstream-key"}))
        start.procs.append((started[-1].proc, started[-1].log))  # type: ignore[attr-defined]
        return started[-1].url

    def stop() -> list[dict[str, Any]]:
        for gw in started:
            gw.stop_blocking()
        return [x for gw in started for x in gw.log_lines() if x.get("event") == "request"]

    start.procs = []  # type: ignore[attr-defined]
    start.stop = stop  # type: ignore[attr-defined]
    return start


async def test_three_processes_hold_one_budget_exactly_and_the_report_adds_up(
    gateways: Gateways, upstream: Any, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Concurrent requests with random ``max_tokens`` through three gateway processes on one Redis:
    the settled spend stays within the budget (each worst case reserved covers its real cost, so the
    slack of one request is 0 here), refusals name it, and the report equals the request log's sum."""
    server = await upstream("openai")
    team = f"t-{uuid.uuid4().hex[:8]}"
    budget = 20_000  # millionths of a EUR: 2 cents
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(yaml.safe_dump(spend_config(server, redis_server.url, team, budget={"amount": "0.02"})))
    env = {UPSTREAM_KEY_ENV: "upstream-key"}
    started = [await gateways.start("--config", str(cfg), *LOCAL_JSON, env=env) for _ in range(3)]
    urls = [gw.url for gw in started]
    rng = random.Random(26)
    plan = [(f"r{i}", urls[i % 3], rng.choice(PROMPTS), rng.randint(1, 60)) for i in range(120)]
    gate = asyncio.Semaphore(12)
    refusals: list[tuple[int, dict[str, str], dict[str, Any]]] = []
    ok = 0
    async with aiohttp.ClientSession() as session:

        async def one(rid: str, url: str, prompt: str, max_tokens: int) -> None:
            nonlocal ok
            path, headers, body = OPENAI.request("m", prompt, False, max_tokens=max_tokens)
            headers["X-Request-Id"] = rid
            async with gate, session.post(url + path, json=body, headers=headers) as resp:
                if resp.status == 200:
                    ok += 1
                else:
                    refusals.append((resp.status, dict(resp.headers), await resp.json()))

        await asyncio.gather(*(one(*p) for p in plan))
        usage = await settled(redis_server.url, team, ok)
        counted, utilisation = 0.0, []
        for url in urls:
            async with session.get(url + "/metrics") as resp:
                for line in (await resp.text()).splitlines():
                    if line.startswith("gateway_spend_total{") and f'team="{team}"' in line:
                        assert 'model="m"' in line and 'currency="EUR"' in line, line
                        counted += float(line.rsplit(" ", 1)[1])
                    if line.startswith(f'gateway_budget_utilisation{{team="{team}",unit="money"}}'):
                        utilisation.append(float(line.rsplit(" ", 1)[1]))
        report_urls = [f"{urls[0]}/admin/spend?group_by={g}&period=month" for g in ("team", "key", "model", "target")]
        reports = []
        for report_url in report_urls:
            async with session.get(report_url, headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
                assert resp.status == 200, await resp.text()
                reports.append(await resp.json())
    cli = subprocess.run(
        [sys.executable, "-m", "gateway", "spend", "--url", urls[1], "--group-by", "model", "--json"],
        env={**os.environ, "LLM_GATEWAY_ADMIN_KEY": ADMIN},
        capture_output=True,
        text=True,
        check=True,
    )
    table = subprocess.run(
        [sys.executable, "-m", "gateway", "spend", "--url", urls[2]],
        env={**os.environ, "LLM_GATEWAY_ADMIN_KEY": ADMIN},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for gw in started:
        await gw.stop()
    lines = [x for gw in started for x in gw.log_lines() if x.get("event") == "request"]

    spent = await budget_spent(redis_server.url, team)
    # a request's slack: how far its real cost passed its estimate (the prompt at 4 characters a
    # token, max_tokens of completion), from its log line
    sent = {rid: (prompt, max_tokens) for rid, _, prompt, max_tokens in plan}
    slack = [
        cost(x["prompt_tokens"], x["completion_tokens"])
        - cost(len(sent[x["request_id"]][0]) // 4 + 1, sent[x["request_id"]][1])
        for x in lines
        if x["status"] == 200
    ]
    assert 0 < spent <= budget + max(0, *slack)
    assert ok >= 10 and refusals, (ok, len(refusals))  # the budget was binding
    month_end = iso(calendar("month", ZoneInfo(ZONE), time.time())[1], ZoneInfo(ZONE))
    for status, headers, body in refusals:
        assert status == 429 and body["error"]["type"] == "rate_limit_error"
        assert "budget of 0.020000 EUR per month" in body["error"]["message"] and month_end in body["error"]["message"]
        assert headers["X-Budget-Reset"] == month_end and 0 <= float(headers["X-Budget-Remaining"]) < 0.02
    # independently: each answered request's cost from its log line's token counts and the price
    answered = [x for x in lines if x["status"] == 200]
    assert len(answered) == ok and all(x["target"] == "up" and x["currency"] == "EUR" for x in answered)
    logged = sum(cost(x["prompt_tokens"], x["completion_tokens"]) for x in answered)
    assert logged == spent == usage["spend"]
    assert counted == pytest.approx(logged / 1e6, abs=1e-9)
    assert len(utilisation) == 3 and all(u > 0 for u in utilisation)  # each replica admitted some
    team_report, key_report, model_report, target_report = reports
    assert team_report["rows"] == [{"team": team, "spend": f"0.{logged:06d}", "spend_micros": logged}]
    assert key_report["rows"] == [{"team": team, "key": "k1", "spend": f"0.{logged:06d}", "spend_micros": logged}]
    assert model_report["rows"] == [{"model": "m", "spend": f"0.{logged:06d}", "spend_micros": logged}]
    assert target_report["rows"] == [{"target": "up", "spend": f"0.{logged:06d}", "spend_micros": logged}]
    assert json.loads(cli.stdout) == model_report
    assert table.splitlines()[1].split() == ["TEAM", "SPEND"] and table.splitlines()[2].split() == [
        team,
        f"0.{logged:06d}",
    ]


class Target:
    """What admission reads of a route's target: its name (the price's key)."""

    name = "up"


def outage_admission(
    url: str, on_failure: str, amount: Decimal = Decimal(1), limits: LimitValues | None = None
) -> tuple[Admission, FailoverLimiter, Any]:
    zone = ZoneInfo(ZONE)
    budget = tuple(rules(Budget(amount=amount), zone, "EUR"))
    teams = {"a": TeamPolicy(limits=limits or LimitValues(), budget=budget)}
    prices = PriceTable.of(SpendSettings(prices=(Price(model="m", input=Decimal(IN), output=Decimal(OUT)),)))
    client = redis_client(RedisConfig(url=url, timeout_ms=1000))
    limiter = FailoverLimiter(RedisLimiter(client), LocalLimiter(), {"bud": on_failure}, retry_seconds=0.5)
    return Admission(limiter, teams, Settings(admission_timeout=0), Spend(prices)), limiter, client


async def test_budgets_fail_closed_or_open_and_spend_made_meanwhile_reaches_redis() -> None:
    """``closed`` (the default): 503 while Redis is down. ``open``: admitted on this process's share,
    and the requests' whole cost is settled into the Redis budget once it answers again."""
    server = RedisServer().start()
    request = InternalRequest(
        Operation.COMPLETION, model="m", prompts=("alpha beta gamma",), sampling=Sampling(max_tokens=20)
    )
    targets = cast("list[Upstream]", [Target()])
    peek = aioredis.Redis.from_url(server.url)
    closed, closed_limiter, closed_client = outage_admission(server.url, "closed")
    admission, limiter, client = outage_admission(server.url, "open")
    try:
        async with running(admission):
            await admission.admit(Ask("a", "k1", request, model="m", targets=targets))  # connected before the outage
            await closed.admit(Ask("a", "k1", request, model="m", targets=targets))
            server.stop()
            with pytest.raises(LimitsUnavailable, match="spend cannot be checked"):
                await closed.admit(Ask("a", "k1", request, model="m", targets=targets))
            for _ in range(5):
                plan = await admission.admit(Ask("a", "k1", request, model="m", targets=targets))
                assert admission.release(plan, 3, 7, 0, "m", "up") == cost(3, 7)
            assert not limiter.up
            await eventually(lambda: limiter.held() == 5 and not admission.pending, "five held, none pending")
            server.start()
            await eventually(lambda: not limiter.held() and limiter.outage.since is None, "all given back, no outage")
        assert await budget_spent(server.url, "a") == 5 * cost(3, 7)  # Redis restarted empty: theirs alone
        assert (await settled(server.url, "a", 5))["spend"] == 5 * cost(3, 7)
    finally:
        await peek.aclose()
        for lim, cli in ((limiter, client), (closed_limiter, closed_client)):
            await lim.close()
            await cli.aclose()
        server.close()


async def test_requests_admitted_during_an_outage_are_added_to_redis_when_it_returns() -> None:
    """``open``: requests admitted in process while Redis was out and still running when it answers
    again are added to its budgets and concurrency leases (``scripts.ADOPT``), so another gateway is
    refused what they hold rather than walking the budget past its amount; settled, they leave
    exactly their cost and nothing held."""
    server = RedisServer().start()
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("alpha",), sampling=Sampling(max_tokens=20))
    ask = Ask("a", "k1", request, model="m", targets=cast("list[Upstream]", [Target()]))
    amount, conc = Decimal("0.003"), LimitValues(concurrency=8)  # 3000 millionths; a worst case is 670
    here, limiter, client = outage_admission(server.url, "open", amount, conc)
    other, other_limiter, other_client = outage_admission(server.url, "open", amount, conc)
    peek = aioredis.Redis.from_url(server.url)
    try:
        async with running(here), running(other):
            await here.admit(ask)  # connected before the outage
            server.stop()
            outage = [await here.admit(ask) for _ in range(3)]  # this process's share; they keep running
            assert not limiter.up
            server.start()  # empty: only what comes back to it counts
            await eventually(lambda: limiter.up, "the breaker closed")
            later = await here.admit(ask)  # first adds the three running ones
            want = later.cost_estimate
            assert await budget_spent(server.url, "a") == 4 * want
            assert await peek.zcard(f"{tag('a')}:budget:held") == 4 and await peek.zcard(f"{tag('a')}:conc") == 4
            with pytest.raises(GatewayError) as refused:  # 4 x 670 held of 3000: no room for a fifth
                await other.admit(ask)
            assert refused.value.status == 429 and "budget of 0.003000 EUR" in str(refused.value), refused.value
            for plan in [*outage, later]:
                here.release(plan, 3, 7, 0, "m", "up")
            spent = await settled(server.url, "a", 4)
            assert spent["spend"] == await budget_spent(server.url, "a") == 4 * cost(3, 7)
            assert await peek.zcard(f"{tag('a')}:budget:held") == 0 and await peek.zcard(f"{tag('a')}:conc") == 0
            assert await other.admit(ask)  # the room is back
    finally:
        await peek.aclose()
        for lim, cli in ((limiter, client), (other_limiter, other_client)):
            await lim.close()
            await cli.aclose()
        server.close()


async def test_fallbacks_and_cached_tokens_are_charged_at_the_answering_targets_price(
    gateway: GatewayFactory, upstream: Any, redis_server: RedisServer
) -> None:
    """The first target fails (500) and the second answers: charged at the second's price, its cached
    prompt tokens at its cached price, streamed or not. The worst case is reserved at the dearer
    price, so a request that fits only at the first target's price is refused."""
    good, bad = await upstream("openai"), await upstream("openai", faults="[[fault:status=500]]")
    team = f"t-{uuid.uuid4().hex[:8]}"
    cfg = spend_config(good, redis_server.url, team, budget={"amount": "0.05"})
    cfg["models"].append(
        {
            "name": "fb",
            "targets": [target(bad, "openai", name="cheap", weight=1e6), target(good, "openai", name="dear")],
        }
    )
    cfg["spend"]["prices"] += [
        {"model": "fb", "target": "cheap", "input": 1, "output": 1},
        {"model": "fb", "target": "dear", "input": 100, "cached_input": 50, "output": 300},
    ]
    gw = await gateway(parse_config(cfg))
    charged = 0
    for stream in (False, True):
        answer = await gw.send(OPENAI, "fb", "alpha beta gamma [[fault:cached=2]]", stream, max_tokens=20)
        assert answer.status == 200, answer.raw
        prompt, completion = answer.usage["prompt_tokens"], answer.usage["completion_tokens"]
        charged += (prompt - 2) * 100 + 2 * 50 + completion * 300  # the fake reports 2 of them cached
    assert len(bad.requests) == 2  # each request went to the cheap target first
    usage = await settled(redis_server.url, team, 2)
    assert usage["target:dear:spend"] == usage["model:fb:spend"] == usage["spend"] == charged
    assert "target:cheap:spend" not in usage
    room = 50_000 - charged  # the next worst case: 9 prompt tokens and 160 completion tokens
    assert 9 * 1 + 160 * 1 < room < 9 * 100 + 160 * 300
    refused = await gw.send(OPENAI, "fb", "alpha beta gamma [[fault:cached=2]]", False, max_tokens=160)
    assert refused.status == 429 and len(bad.requests) == 2


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster().start()
    yield cluster
    cluster.close()


@pytest.mark.parametrize("backend", ["redis", "cluster", "local"])
async def test_a_budget_is_charged_exactly_what_answers_cost(
    gateway: GatewayFactory, upstream: Any, request: pytest.FixtureRequest, backend: str
) -> None:
    """Reserved, then settled to the cost of each answer's usage, on one Redis, a Cluster (every key
    of a team in its slot) or in process; a failed request costs nothing; the key's own budget refuses
    by name once its tokens run out."""
    url = None
    if backend != "local":
        url = request.getfixturevalue("redis_cluster" if backend == "cluster" else "redis_server").url
    budget = {"amount": "0.05", "period": "rolling", "window_seconds": 3600}
    key_budget = {"tokens": 200, "period": "week"}
    _, team, gw = await spend_gateway(
        gateway, upstream, url, backend == "cluster", budget=budget, key_budget=key_budget
    )
    costs = []
    for prompt in PROMPTS[:3]:
        answer = await gw.send(OPENAI, "m", prompt, False, max_tokens=8)
        assert answer.status == 200
        costs.append(cost(answer.usage["prompt_tokens"], answer.usage["completion_tokens"]))
    failed = await gw.send(OPENAI, "m", "alpha [[fault:status=500]]", False, max_tokens=8)
    assert failed.status == 502
    admin = {"Authorization": f"Bearer {ADMIN}"}

    async def reported_is(micros: int) -> bool:
        async with gw.session.get(gw.url + "/admin/spend?group_by=key&period=day", headers=admin) as resp:
            rows = (await resp.json())["rows"]
        return bool(rows) and rows[0]["spend_micros"] == micros

    await eventually(lambda: reported_is(sum(costs)), "the report equal to the costs (settled after the answers)")
    spent_row = (
        f"<td>{team}</td><td>0.050000 EUR</td><td>per 3600 s rolling</td><td>hard</td><td>0.{sum(costs):06d} EUR"
    )

    async def shown() -> bool:
        async with gw.session.get(gw.url + "/status", headers=admin) as resp:
            return spent_row in await resp.text()

    # the failed request's worst case goes back too, with its own settlement (it may come after the
    # answered ones': settlements are batched)
    await eventually(shown, "the status page's spend back at the answers' costs")
    refused = await gw.send(OPENAI, "m", "alpha beta", False, max_tokens=160)  # tokens: past the key's 200
    assert refused.status == 429 and "the key's budget of 200 tokens per week" in refused.body["error"]["message"]


async def test_a_rolling_budget_sums_its_slices_and_drops_older_fields(client: aioredis.Redis) -> None:
    """The script against Redis directly: spend in the window's slices counts, older spend does not and
    is pruned once the hash holds many fields."""
    team, day = f"t-{uuid.uuid4().hex[:8]}", 86400
    budget = Budget(tokens=100, period="rolling", window_seconds=12 * day)  # slices of a day
    limits = plan_layout(team, "k1", LimitValues(), LimitValues(), tuple(rules(budget, ZoneInfo(ZONE), "EUR")))
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("x",), sampling=Sampling(max_tokens=7))
    first = planned(team, "k1", limits, request, new_lease())  # 10 tokens' worst case (a prompt of 3): 95 of 100
    window = first.windows[0]
    assert window is not None
    starts = [int(f.split(":")[0]) for f in window.fields]
    key = limits.keys[0]
    old = {f"{starts[-1] - day * (i + 1)}:t": 1000 for i in range(70)}  # before the window: not counted
    await client.hset(key, mapping={**old, f"{starts[5]}:t": 40, f"{starts[-1]}:t": 45})
    limiter = RedisLimiter(client)
    assert await limiter.admit(first, 1000) is None
    fields = {k.decode(): int(v) for k, v in (await client.hgetall(key)).items()}
    assert fields == {f"{starts[5]}:t": 40, f"{starts[-1]}:t": 45, f"{starts[0]}:t": 10}
    refused = await limiter.admit(planned(team, "k1", limits, request, new_lease()), 1000)
    assert refused is not None and refused.remaining == 5 and refused.check.kind == "bud"
    await client.delete(key)


async def test_an_admission_with_budgets_is_one_redis_call(redis_server: RedisServer) -> None:
    """Every limit kind and two budgets (team money, key tokens): still one script call per admission."""
    zone = ZoneInfo(ZONE)
    policy = TeamPolicy(
        LimitValues(rpm=1000, tpm=10**6, concurrency=50),
        LimitValues(),
        None,
        tuple(rules(Budget(amount=Decimal(5)), zone, "EUR")),
        tuple(rules(Budget(tokens=10**6, period="day"), zone, "EUR")),
    )
    client = aioredis.Redis.from_url(redis_server.url)
    admission = Admission(RedisLimiter(client), {"a": policy}, Settings(), Spend())
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=("alpha",), sampling=Sampling(max_tokens=5))

    async def calls() -> int:
        stats = await client.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))

    try:
        await admission.admit(Ask("a", "k1", request))  # loads the script
        before = await calls()
        plans = [await admission.admit(Ask("a", "k1", request)) for _ in range(10)]
        assert await calls() - before == 10
        assert all(len(p.checks) == 5 and p.spent for p in plans)
    finally:
        await client.aclose()


async def test_embeddings_are_charged_at_the_models_embedding_price(gateway: GatewayFactory) -> None:
    """An embeddings request's input tokens cost the price's ``embedding`` rate (not ``input``, no
    output), reserved and settled so, and reported; a chat on the same model still pays ``input``."""
    from tests.integration.test_responses import scripted_target, scripted_upstream

    async with scripted_upstream() as server:
        team = f"t-{uuid.uuid4().hex[:8]}"
        models = [
            {"name": "e", "kind": "embedding", "targets": [{**scripted_target(server), "name": "vec"}]},
        ]
        data = {
            "models": models,
            "teams": [
                {"id": team, "keys": [{"id": "k1", "sha256": hash_key(KEY)}], "budget": {"amount": 1, "period": "day"}}
            ],
            "spend": {"prices": [{"model": "e", "input": 1000, "output": 1000, "embedding": 7}]},
            "admin": {"key_sha256": hash_key(ADMIN)},
        }
        gw = await gateway(parse_config(data))
        texts = ["one two three", "four five"]  # the scripted upstream counts words: 5 tokens
        headers = {"Authorization": f"Bearer {KEY}"}
        async with gw.session.post(
            gw.url + "/v1/embeddings", json={"model": "e", "input": texts}, headers=headers
        ) as resp:
            body = await resp.json()
            assert resp.status == 200, body
        assert body["usage"]["prompt_tokens"] == 5
        admin = {"Authorization": f"Bearer {ADMIN}"}

        async def reported() -> Any:
            async with gw.session.get(gw.url + "/admin/spend?group_by=model&period=day", headers=admin) as got:
                rows = (await got.json())["rows"]
            return rows if rows and rows[0]["spend_micros"] > 0 else None

        (row,) = await eventually(reported, "the embeddings request settled in the report")
        assert row["model"] == "e" and row["spend_micros"] == 5 * 7  # at the input price: 5000

"""Spend through the gateway against a real Redis: budgets that hold exactly across three gateway
processes, refusals in each client's dialect naming the budget and its reset, soft budgets, fallbacks
and cached tokens charged at the answering target's price, embeddings at their own rate, and the spend
report checked against the request log. Streams cut by their client: ``test_spend_cut_streams``;
admission against Redis itself (outages, rolling windows): ``test_spend_admission``."""

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
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest
import yaml

from gateway.limits.budget_rules import calendar, iso
from gateway.runtime.config import hash_key, parse_config
from tests.integration.conftest import UPSTREAM_KEY_ENV, GatewayFactory, target
from tests.integration.dialect_clients import INGRESSES, KEY, without_team
from tests.integration.spend_rig import (
    ADMIN,
    LOCAL_JSON,
    OPENAI,
    PROMPTS,
    ZONE,
    budget_spent,
    cost,
    settled,
    spend_config,
    spend_gateway,
)
from tests.support import eventually
from tests.support.gateways import Gateways
from tests.support.redis_servers import RedisServer


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

"""Several gateway processes sharing one Redis, as replicas behind a load balancer: limits stay exact,
revocation reaches every replica within 2 s, a killed replica's concurrency leases come back after
their TTL, and the admin API is its own realm."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.runtime.config import hash_key
from tests.fakes import upstream as fake
from tests.support import eventually
from tests.support.gateways import ROOT, Gateways
from tests.support.redis_servers import RedisServer

ADMIN = "admin-secret-key"
STATIC = "static-team-key"


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
async def fleet(redis: RedisServer, tmp_path: Path) -> AsyncIterator[Any]:
    upstream = await fake.start("openai")
    gateways = Gateways(tmp_path)

    async def start(n: int, team: str = "") -> list[tuple[str, subprocess.Popen[bytes]]]:
        cfg = tmp_path / "gw.yaml"
        cfg.write_text(
            f"""models:
  - name: m
    targets: [{{provider: openai, base_url: "{upstream.url}"}}]
teams:
  - id: team1
    keys: [{{id: static, sha256: {hash_key(STATIC)}}}]
{team}
  - id: team2
redis: {{url: "{redis.url}", timeout_ms: 1000}}
limits: {{admission_timeout: 0, lease_ttl: 2, replicas: {n}}}
admin: {{key_sha256: {hash_key(ADMIN)}}}
"""
        )
        started = [await gateways.start("--config", str(cfg), ready=False) for _ in range(n)]
        for gw in started:
            await gw.healthy()
        return [(gw.url, gw.proc) for gw in started]

    start.upstream = upstream  # type: ignore[attr-defined]
    yield start
    await gateways.close()
    await upstream.close()


async def complete(session: aiohttp.ClientSession, url: str, key: str, **extra: Any) -> int:
    body = {"model": "m", "prompt": "hi", "max_tokens": 3, **extra}
    async with session.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"}) as r:
        await r.read()
        return r.status


async def test_three_replicas_admit_exactly_n(fleet: Any) -> None:
    nodes = await fleet(3, "    limits: {rpm: 15}")
    async with aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(*(complete(session, nodes[i % 3][0], STATIC) for i in range(60)))
    assert statuses.count(200) == 15 and statuses.count(429) == 45


async def test_killed_replica_leases_expire(fleet: Any) -> None:
    nodes = await fleet(2, "    limits: {concurrency: 2}")
    (a, proc_a), (b, _) = nodes
    async with aiohttp.ClientSession() as session:
        held = [
            asyncio.create_task(complete(session, a, STATIC, prompt="x [[fault:hang_before=30]]")) for _ in range(2)
        ]
        await eventually(lambda: fleet.upstream.active == 2, "both held requests at the upstream")
        assert await complete(session, b, STATIC) == 429  # both slots are held on replica A
        proc_a.send_signal(signal.SIGKILL)
        await asyncio.gather(*held, return_exceptions=True)

        async def admitted() -> bool:
            return await complete(session, b, STATIC) == 200

        # The bound is what this test checks: the leases' TTL (2 s) and the time it takes to see them go.
        await eventually(admitted, "a dead replica's leases expired after their TTL", within=6)


async def test_issued_keys_and_revocation_reach_every_replica(fleet: Any) -> None:
    nodes = await fleet(3)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(nodes[0][0] + "/admin/keys", json={"teams": ["team1", "team2"]}, headers=admin) as r:
            assert r.status == 201
            created = await r.json()
        key = created["key"]
        assert key.startswith("gwk_") and "digest" not in created
        assert [await complete(session, url, key) for url, _ in nodes] == [200, 200, 200]
        async with session.get(nodes[1][0] + "/admin/keys", headers=admin) as r:
            listed = await r.json()
        assert [k["id"] for k in listed["keys"]] == [created["id"]] and key not in str(listed)
        async with session.delete(nodes[2][0] + f"/admin/keys/{created['id']}", headers=admin) as r:
            assert r.status == 200
        pending = {url for url, _ in nodes}

        async def refused_everywhere() -> bool:
            for url in list(pending):
                if await complete(session, url, key) == 401:
                    pending.discard(url)
            return not pending

        # The bound is what this test checks: revocation reaches every replica within 2 s.
        await eventually(refused_everywhere, "the revoked key refused by every replica", within=2.0)
        # the admin API is its own realm: a team key is not an admin key
        async with session.get(nodes[0][0] + "/admin/keys", headers={"Authorization": f"Bearer {STATIC}"}) as r:
            assert r.status == 401
        async with session.get(nodes[0][0] + "/admin/teams/team1/usage", headers=admin) as r:
            usage = await r.json()
        assert sum(b["requests"] for b in usage["buckets"]) >= 3


async def test_cli_keys_create_and_list(fleet: Any) -> None:
    nodes = await fleet(1)
    url = nodes[0][0]
    env = {**os.environ, "LLM_GATEWAY_ADMIN_KEY": ADMIN}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "gateway", "keys", *args, "--url", url, "--json"]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=30)

    created = await asyncio.to_thread(cli, "create", "--team", "team1")
    assert created.returncode == 0 and '"key": "gwk_' in created.stdout, created.stderr
    listed = await asyncio.to_thread(cli, "list")
    assert listed.returncode == 0 and '"team1"' in listed.stdout


async def test_three_replicas_share_token_and_concurrency_limits(fleet: Any) -> None:
    # estimate per request: the prompt's bound (its bytes and a token either side: 4 for "hi",
    # gateway.core.prompt) + max_tokens 3; the stand-in counts words, so "hi" uses 1 + 3 = 4 tokens
    nodes = await fleet(3, "    limits: {tpm: 90, concurrency: 2}")
    began = time.monotonic()
    async with aiohttp.ClientSession() as session:
        slow = await asyncio.gather(
            *(complete(session, nodes[i % 3][0], STATIC, prompt="hi [[fault:hang_before=1]]") for i in range(6))
        )
        assert sorted(slow) == [200, 200, 429, 429, 429, 429]
    nodes = await fleet(3, "    limits: {tpm: 90}")
    async with aiohttp.ClientSession() as session:
        fast = await asyncio.gather(*(complete(session, nodes[i % 3][0], STATIC) for i in range(30)))
    # The second fleet shares the first one's team bucket, which the 2 admitted slow requests used: the
    # stand-in counts words, so "hi [[fault:hang_before=1]]" is 2 prompt + 3 completion tokens, 10 in all. The
    # bucket admits while it holds an estimate (7) and gets back what each used less; it refills at 1.5 token/s
    # meanwhile, so at most that many more tokens' worth may pass.
    refilled = 1.5 * (time.monotonic() - began)
    assert (90 - 10) // 7 <= fast.count(200) <= (90 - 10 + refilled) // 4, (fast.count(200), refilled)
    assert fast.count(200) + fast.count(429) == 30

"""What lives only in Redis survives a Redis restart with the persistence compose and the chart run it
with (``deploy/compose.yaml``: append-only): an issued key still authenticates and the day's spend is
still counted against the budget, so a budget does not silently reset. The same restart with no
persistence (compose's settings before) loses both: the check can fail. Without Redis at all, a key
issued with ``keys create`` comes with a warning that it lives only in the process."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.runtime.config import hash_key, parse_config
from tests.integration.conftest import GatewayFactory
from tests.integration.spend_rig import budget_spent
from tests.redis_servers import REDIS_SERVER, free_port, wait_port
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "admin-key-for-durability"
NO_PERSISTENCE = ["redis-server", "--save", "", "--appendonly", "no"]


def compose_redis() -> list[str]:
    command: list[str] = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]["redis"]["command"]
    return command


class Restartable:
    """redis-server with a command's arguments, on a free loopback port, in a directory of its own."""

    def __init__(self, command: list[str]) -> None:
        assert command[0] == "redis-server"
        self.args = command[1:]
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gw-redis-durable-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        own = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        self.proc = subprocess.Popen([REDIS_SERVER, *self.args, *own], stdout=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self) -> None:
        """As ``docker compose restart`` stops it: SIGTERM, and Redis shuts down its own way."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        wait_port(self.port, up=False)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def servers() -> Iterator[list[Restartable]]:
    made: list[Restartable] = []
    yield made
    for server in made:
        server.close()


def config(redis_url: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "models": [{"name": "demo", "targets": [{"provider": "mock", "engine": {"tokens_per_second": 0}}]}],
        "teams": [{"id": "durable", "budget": {"amount": 5, "period": "day"}}],
        "spend": {"prices": [{"model": "demo", "input": 1000, "output": 3000}]},
        "admin": {"key_sha256": hash_key(ADMIN)},
    }
    if redis_url is not None:
        data["redis"] = {"url": redis_url, "timeout_ms": 1000}
    return data


ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
BODY = {"model": "demo", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}


@pytest.mark.parametrize(
    ("command", "kept"), [(compose_redis(), True), (NO_PERSISTENCE, False)], ids=["compose", "no-persistence"]
)
async def test_a_redis_restart_keeps_issued_keys_and_spend(
    gateway: GatewayFactory, servers: list[Restartable], command: list[str], kept: bool
) -> None:
    redis = Restartable(command)
    servers.append(redis)
    redis.start()
    gw = await gateway(parse_config(config(redis.url)))
    async with gw.session.post(gw.url + "/admin/keys", json={"teams": ["durable"]}, headers=ADMIN_HEADERS) as resp:
        created = await resp.json()
        assert resp.status == 201 and created["stored"] == "redis" and "warning" not in created, created
    key = {"Authorization": f"Bearer {created['key']}"}
    async with gw.session.post(gw.url + "/v1/chat/completions", json=BODY, headers=key) as resp:
        assert resp.status == 200, await resp.text()

    async def settled() -> bool:
        return await budget_spent(redis.url, "durable") > 0

    await eventually(settled, "the answer settled")  # the settlement follows the answer
    spent = await budget_spent(redis.url, "durable")

    redis.stop()
    redis.start()

    after = await gateway(parse_config(config(redis.url)))  # a gateway that has cached nothing
    async with after.session.post(after.url + "/v1/chat/completions", json=BODY, headers=key) as resp:
        assert resp.status == (200 if kept else 401), await resp.text()
    assert (await budget_spent(redis.url, "durable") >= spent) is kept


async def test_a_key_issued_without_redis_comes_with_a_warning(gateway: GatewayFactory) -> None:
    gw = await gateway(parse_config(config(None)))
    async with gw.session.post(gw.url + "/admin/keys", json={"teams": ["durable"]}, headers=ADMIN_HEADERS) as resp:
        created = await resp.json()
    assert created["stored"] == "process" and "lives only in this gateway process" in created["warning"]
    cli = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "gateway", "keys", "create", "--team", "durable", "--json"),
        env={"LLM_GATEWAY_URL": gw.url, "LLM_GATEWAY_ADMIN_KEY": ADMIN, "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await cli.communicate()
    assert cli.returncode == 0, err
    assert b'"key": "gwk_' in out  # the CLI found the gateway by LLM_GATEWAY_URL, not --url
    (line,) = err.decode().splitlines()
    assert line.startswith("warning: no redis in the config: this key lives only in this gateway process")

"""Streams that survive their replica, on the real engine: two ``vllm serve`` replicas of the tiny model
in one pool; a greedy 300-token stream whose replica is SIGKILLed (or SIGSTOPped past the idle bound)
after about 50 tokens reaches each dialect's client whole: the unbroken run's text, one finish, and
usage 300 (``gateway/routing/resume.py``).

The replicas are this module's own (they are killed), not the session's shared servers; a killed one
is started again before the next case."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from backends.pool.replicas import ReplicaPool
from gateway.obs import metrics as m
from gateway.web.app import create_app
from gateway.web.state import GATEWAY
from tests.integration.conftest import config
from tests.integration.dialect_clients import BY_NAME, KEY, Ingress
from tests.vllm.conftest import running_vllm
from tests.vllm.server import VLLM

TOKENS, BREAK_AT = 300, 50
CHAT = Ingress("openai-chat", "/v1/chat/completions", {"Authorization": f"Bearer {KEY}"}, {})
# each streaming dialect, with what makes a greedy answer run to its length (ignore_eos where the
# dialect has it, Friendli's min_tokens; SGP has neither, and the tiny model's greedy answer runs on)
DIALECTS: dict[str, tuple[Ingress, dict[str, Any]]] = {
    "openai": (BY_NAME["openai"], {"ignore_eos": True}),
    "openai-chat": (CHAT, {"ignore_eos": True}),
    "friendli": (BY_NAME["friendli"], {"min_tokens": TOKENS}),
    "sgp": (BY_NAME["sgp5"], {}),
    "octoai": (BY_NAME["octoai"], {"ignore_eos": True}),
}


class Replica:
    """One ``vllm serve`` that a test may kill; ``up`` starts it again if it is gone."""

    def __init__(self, log: Path, env: dict[str, str] | None) -> None:
        self.log, self.env = log, env
        self.stack = contextlib.ExitStack()
        self.server: VLLM | None = None
        self.port = 0

    def up(self) -> VLLM:
        if self.server is None:
            self.server = self.stack.enter_context(running_vllm(self.log, self.env))
        return self.server

    def signal(self, sig: signal.Signals) -> None:
        assert self.server is not None
        os.killpg(self.server.pid, sig)  # the API server and its engine core
        if sig == signal.SIGKILL:
            self.stack.close()
            self.stack, self.server = contextlib.ExitStack(), None


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Replica]]:
    cores = sorted(os.sched_getaffinity(0))
    pinned = {"VLLM_CPU_OMP_THREADS_BIND": str(cores[-1])} if len(cores) > 1 else None
    made = [Replica(tmp_path_factory.mktemp(f"resume{i}") / "vllm.log", env) for i, env in enumerate((None, pinned))]
    try:
        yield made
    finally:
        for r in made:
            r.stack.close()


@contextlib.asynccontextmanager
async def gateway(replicas: list[Replica]) -> AsyncIterator[tuple[str, ReplicaPool]]:
    servers = [r.up() for r in replicas]
    pool: dict[str, Any] = {"provider": "vllm", "replicas": [s.url for s in servers], "model": "tiny"}
    pool |= {"balance": {"strategy": "round-robin"}, "timeouts": {"idle": 3, "first_byte": 60, "total": 120}}
    app = create_app(config([{"name": "tiny", "targets": [pool]}]))  # team1 holds KEY, as the clients say
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        served = app[GATEWAY].models.resolve("tiny").route.upstreams[0]
        assert isinstance(served, ReplicaPool)
        yield str(server.make_url("")), served
    finally:
        await server.close()


def request(ingress: Ingress, extra: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    path, headers, body = ingress.request("tiny", "hello world", True, max_tokens=TOKENS, temperature=0, **extra)
    if ingress is CHAT:
        del body["prompt"]
        body["messages"] = [{"role": "user", "content": "hello world"}]
        body["stream_options"] = {"include_usage": True}
    return path, headers, body


def tokens_in(data: dict[str, Any]) -> list[str]:
    """The text pieces one client chunk carries."""
    return [c.get("text") or (c.get("delta") or {}).get("content") or "" for c in data.get("choices") or ()]


def serving(pool: ReplicaPool, replicas: list[Replica]) -> Replica:
    """The replica the stream is on: the one the pool counts a stream in flight to."""
    (url,) = (s.url for s in pool.states if s.in_flight)
    (replica,) = (r for r in replicas if r.server is not None and r.server.url == url)
    return replica


def resumes() -> float:
    return sum(s.value for metric in m.RESUMES.collect() for s in metric.samples if s.name.endswith("_total"))


async def stream(
    session: aiohttp.ClientSession, url: str, ingress: Ingress, extra: dict[str, Any], fault: Any = None
) -> tuple[str, list[str], Any, bool, bool]:
    """(text, finish reasons, usage, error seen, [DONE]) of one streamed answer; ``fault`` is awaited
    once the client has ``BREAK_AT`` text chunks."""
    path, headers, body = request(ingress, extra)
    text, finishes, usage, error, done, chunks = "", [], None, False, False, 0
    async with session.post(url + path, json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        async for line in resp.content:
            if not line.startswith(b"data: "):
                continue
            if line.strip() == b"data: [DONE]":
                done = True
                continue
            data = json.loads(line[6:])
            error = error or "error" in data
            pieces = tokens_in(data)
            text += "".join(pieces)
            finishes += [c["finish_reason"] for c in data.get("choices") or () if c.get("finish_reason")]
            usage = data.get("usage") or usage
            chunks += sum(1 for p in pieces if p)
            if fault is not None and chunks >= BREAK_AT:
                await fault()
                fault = None
    return text, finishes, usage, error, done


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["sigkill", "sigstop"])
@pytest.mark.parametrize("dialect", list(DIALECTS))
async def test_a_stream_whose_replica_dies_arrives_whole(
    replicas: list[Replica], dialect: str, sig: signal.Signals
) -> None:
    ingress, extra = DIALECTS[dialect]
    async with aiohttp.ClientSession() as session, gateway(replicas) as (url, pool):
        want = await stream(session, url, ingress, extra)
        assert want[1] and not want[3] and len(want[0]) > 0, want
        stopped: list[Replica] = []

        async def fault() -> None:
            victim = serving(pool, replicas)
            victim.signal(sig)
            stopped.append(victim)

        before = resumes()
        try:
            got = await stream(session, url, ingress, extra, fault)
            await session.get(url + "/metrics")  # the request's record is drained before a scrape
        finally:
            for r in stopped:
                if sig == signal.SIGSTOP:
                    r.signal(signal.SIGCONT)
    assert stopped, "the stream ended before the fault"
    assert resumes() == before + 1, "the fault came after the replica had sent the whole answer"
    text, finishes, usage, error, done = got
    assert not error and text == want[0] and finishes == want[1] and done == want[4], (got, want)
    if usage is not None or want[2] is not None:
        assert usage == want[2], (usage, want[2])
    if dialect != "sgp":
        assert want[2]["completion_tokens"] == TOKENS

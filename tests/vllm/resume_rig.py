"""Two real ``vllm serve`` replicas of the tiny model in one gateway pool, each behind a ``Breaker``: a
loopback TCP relay that, armed, lets a generation's answer through up to its ``BREAK_AT``th token, then
signals its replica (SIGKILL, or SIGSTOP) and cuts the connection there (reset) or holds it silent
(past the pool's idle deadline). What ``test_vllm_resume.py`` and the scorecard's real-vLLM rows
(``benchmarks/scorecard.py --vllm``) share.

Why the relay: the tiny model writes 300 tokens in about a second, so a fault timed on what the client
has read lands, on a busy machine, after the replica has written the whole answer. The relay counts
the replica's own tokens (the ids each event carries, which the gateway asks for where a stream may
resume; one an event where it carries none) and cuts before the event after the one that reaches
``BREAK_AT``, whatever the scheduling. Not its events: a starved API server merges the steps its
reader has not taken yet into one (a clean-clone CI on a loaded machine saw a 300-token answer in
under 50 events). The replicas are the rig's own (they are killed), not the test session's shared
servers; a killed one is started again by ``up`` before the next stream."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from backends.pool.replicas import ReplicaPool
from gateway.obs import metrics as m
from gateway.web.app import create_app
from gateway.web.state import GATEWAY
from tests.integration.conftest import config
from tests.integration.dialect_clients import Ingress, Reading, read_stream, read_whole
from tests.vllm import engine_stats
from tests.vllm.server import VLLM

TOKENS, BREAK_AT = 300, 50
IDLE_SECONDS = 3  # the pool's idle deadline: a SIGSTOPped replica's stream breaks past it
# what makes a greedy answer run to its length where the dialect has it: ignore_eos, Friendli's
# min_tokens (SGP, Messages and Responses have neither; the tiny model's greedy answer runs on)
EXTRA: dict[str, dict[str, Any]] = {
    "openai": {"ignore_eos": True},
    "openai-chat": {"ignore_eos": True},
    "octoai": {"ignore_eos": True},
    "friendli": {"min_tokens": TOKENS},
    "friendli2024": {"min_tokens": TOKENS},
}
Starter = Callable[[Path, dict[str, str] | None], AbstractContextManager[VLLM]]


class Replica:
    """One ``vllm serve`` that may be killed; ``up`` starts it again if it is gone."""

    def __init__(self, log: Path, env: dict[str, str] | None, start: Starter) -> None:
        self.log, self.env, self.start = log, env, start
        self.stack = contextlib.ExitStack()
        self.server: VLLM | None = None

    def up(self) -> VLLM:
        if self.server is None:
            self.server = self.stack.enter_context(self.start(self.log, self.env))
        return self.server

    def signal(self, sig: signal.Signals) -> None:
        assert self.server is not None
        os.killpg(self.server.pid, sig)  # the API server and its engine core
        if sig == signal.SIGKILL:
            self.stack.close()
            self.stack, self.server = contextlib.ExitStack(), None


@contextlib.contextmanager
def replica_pair(logs: Path, start: Starter) -> Iterator[list[Replica]]:
    """Two replicas; the second's compute threads keep to the last core (two CPU engines spread over
    both cores starve each other's step barriers: ``tests/vllm/conftest.py``)."""
    cores = sorted(os.sched_getaffinity(0))
    pinned = {"VLLM_CPU_OMP_THREADS_BIND": str(cores[-1])} if len(cores) > 1 else None
    made = [Replica(logs / f"replica{i}.log", env, start) for i, env in enumerate((None, pinned))]
    try:
        yield made
    finally:
        for r in made:
            r.stack.close()


async def idle(replicas: list[Replica]) -> None:
    """Every replica running and waiting nothing: a replica continued after SIGSTOP finishes the answer
    it was writing, and a greedy answer batched beside another on a CPU engine can come out different
    (the sums run in another order, and the tiny random model's logits are near ties)."""
    for r in replicas:
        assert r.server is not None
        await engine_stats.idle(r.server, "the last case's answers done")


class Breaker:
    """A TCP relay in front of one replica (``url``: where the gateway's pool points). Armed (``armed``
    a signal), the next streamed answer is cut before the chunk of its first event past ``BREAK_AT``
    tokens, the replica gets ``sig``, and the gateway's connection is reset (SIGKILL) or left open
    with nothing more (SIGSTOP); ``fired`` says it happened. One fault per arming, on any of the
    breakers sharing ``fired``."""

    def __init__(self, replica: Replica, fired: asyncio.Event) -> None:
        self.replica, self.fired = replica, fired
        self.armed: signal.Signals | None = None
        self.server: asyncio.Server | None = None
        self.open: set[asyncio.BaseTransport] = set()
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for transport in self.open:  # a held (SIGSTOP) connection too
                transport.abort()
            await self.server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = self.replica.server
        if server is None:  # killed: as a dead replica's port would, no answer
            writer.transport.abort()
            return
        host, port = server.base.removeprefix("http://").split(":")
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.transport.abort()
            return
        self.open |= {writer.transport, up_writer.transport}

        async def upward() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        ends = [asyncio.ensure_future(upward()), asyncio.ensure_future(self._downward(up_reader, writer))]
        try:
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for task in ends:
                task.cancel()
            up_writer.transport.abort()
            writer.transport.abort()
            self.open -= {writer.transport, up_writer.transport}

    async def _downward(self, up: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The replica's bytes to the gateway; armed, cut once ``BREAK_AT`` tokens have passed (only a
        streamed answer has ``data: `` lines: scrapes and /tokenize pass whole)."""
        counter = TokenCounter()
        while data := await up.read(65536):
            if self.armed is not None and not self.fired.is_set():
                cut = counter.feed(data)
                if cut is not None:
                    writer.write(data[:cut])
                    await writer.drain()
                    await self._fire()
                    return
            writer.write(data)
            await writer.drain()

    async def _fire(self) -> None:
        sig, self.armed = self.armed, None
        assert sig is not None
        self.fired.set()
        self.replica.signal(sig)
        if sig == signal.SIGSTOP:  # silent, open: the gateway's idle deadline ends it
            await asyncio.Event().wait()


IDS = re.compile(rb'"token_ids":\[([^\]]*)\]')


class TokenCounter:
    """Counts the tokens of the SSE events in a replica's chunked answer as its bytes pass, and says
    where to cut: at the start of the chunk of the first event after ``BREAK_AT`` tokens, or of the
    event that finishes the answer where that comes first, so that the break is mid-answer (past the
    first token, before the finish) however many tokens an event carries."""

    def __init__(self) -> None:
        self.seen = bytearray()
        self.tokens = 0
        self.next = 0  # where the next event not yet counted may begin

    def feed(self, data: bytes) -> int | None:
        """Where in ``data`` to cut, or None while fewer than ``BREAK_AT`` tokens have passed."""
        old = len(self.seen)
        self.seen += data
        while (at := self.seen.find(b"data: ", self.next)) != -1:
            if self.tokens >= BREAK_AT:
                return self._cut(at, old)
            end = self.seen.find(b"\n\n", at)
            if end == -1:  # the event's end comes in a later read
                return None
            event = bytes(self.seen[at:end])
            if self.tokens > 0 and finishes(event):
                return self._cut(at, old)
            self.tokens += tokens(event)
            self.next = end
        return None

    def _cut(self, at: int, old: int) -> int:
        """Where in the latest read the chunk of the event at ``at`` begins (0: in an earlier read)."""
        line = self.seen.rfind(b"\r\n", 0, max(0, at - 2))  # the end of the chunk before this one
        return max(0, (line + 2 if line != -1 else 0) - old)


FINISH = re.compile(rb'"finish_reason":\s*"')


def finishes(event: bytes) -> bool:
    """An event that ends the answer and carries tokens: a starved API server merges every step left
    into it, so one that reaches ``BREAK_AT`` may also finish; passed, the gateway holds a finished
    answer and has nothing to resume (a clean-clone CI saw it: the fault came, no resume)."""
    return FINISH.search(event) is not None and any(part.strip() for part in IDS.findall(event))


def tokens(event: bytes) -> int:
    """An event's tokens: its ids where it carries them (none in a chat answer's opening role event),
    else one."""
    ids = IDS.findall(event)
    if not ids:
        return 1
    return sum(part.count(b",") + 1 for part in ids if part.strip())


@contextlib.asynccontextmanager
async def gateway(replicas: list[Replica]) -> AsyncIterator[tuple[str, list[Breaker]]]:
    """A gateway (team1 holds the dialect clients' key) whose model ``tiny`` is one round-robin pool
    over the replicas (each started if it is down), each behind its breaker."""
    fired = asyncio.Event()
    breakers = [Breaker(r, fired) for r in replicas]
    for b in breakers:
        b.replica.up()
        await b.start()
    await idle(replicas)
    pool: dict[str, Any] = {"provider": "vllm", "replicas": [b.url for b in breakers], "model": "tiny"}
    timeouts = {"idle": IDLE_SECONDS, "first_byte": 60, "total": 120}
    pool |= {"balance": {"strategy": "round-robin"}, "timeouts": timeouts}
    app = create_app(config([{"name": "tiny", "targets": [pool]}]))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        assert isinstance(app[GATEWAY].models.resolve("tiny").route.upstreams[0], ReplicaPool)
        yield str(server.make_url("")), breakers
    finally:
        await server.close()
        for b in breakers:
            await b.close()


def resumes() -> float:
    return sum(s.value for metric in m.RESUMES.collect() for s in metric.samples if s.name.endswith("_total"))


async def read(session: aiohttp.ClientSession, url: str, ingress: Ingress) -> Reading:
    """One greedy ``TOKENS``-token streamed answer as ``ingress``'s client reads it."""
    fields = {"max_tokens": TOKENS, "temperature": 0, **EXTRA.get(ingress.name, {})}
    path, headers, body = ingress.request("tiny", "hello world", True, **fields)
    async with session.post(url + path, json=body, headers=headers) as resp:
        raw = await resp.read()
        return read_stream(ingress, raw) if resp.status == 200 else read_whole(resp.status, raw)


async def broken(
    session: aiohttp.ClientSession, url: str, breakers: list[Breaker], ingress: Ingress, sig: signal.Signals
) -> tuple[Reading, bool, float]:
    """The answer read while its replica gets ``sig`` past its ``BREAK_AT``th token; whether the fault
    came, and the resumes it caused. A SIGSTOPped replica is continued once the answer is read."""
    for b in breakers:
        b.armed = sig
    before = resumes()
    try:
        got = await read(session, url, ingress)
        await session.get(url + "/metrics")  # the request's record is drained before a scrape
    finally:
        for b in breakers:
            b.armed = None
            if sig == signal.SIGSTOP and b.replica.server is not None:
                b.replica.signal(signal.SIGCONT)
    return got, breakers[0].fired.is_set(), resumes() - before

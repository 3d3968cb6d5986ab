"""``llm-gateway serve`` as a user runs it: a subprocess on a free loopback port, its output in a file of
its own (a pipe nobody reads fills under load and stalls the gateway), ready when its /health answers,
stopped as Ctrl-C stops it (killed if it does not end in time).

What does not belong here: the in-process gateway of the integration tier (``tests/integration/conftest``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.redis_servers import free_port
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
STOP_SECONDS = 30.0  # a hang guard: a gateway that ignores SIGINT for this long is killed


class Served:
    """One started gateway: ``url``, its process, and its output (stdout and stderr) in ``log``."""

    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def __iter__(self) -> Iterator[Any]:
        """``url, proc = ...``: the old launchers' pair, while tests written against them remain."""
        return iter((self.url, self.proc))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """Its JSON log lines (``--log-format json``)."""
        return [json.loads(line) for line in self.output().splitlines() if line.startswith("{")]

    async def healthy(self) -> None:
        async with aiohttp.ClientSession() as session:

            async def answers() -> bool:
                if self.proc.poll() is not None:
                    raise AssertionError(f"gateway exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(self.url + "/health") as resp:
                        return resp.status == 200
                return False

            await eventually(answers, f"the gateway at {self.url} healthy")

    async def stop(self, sig: signal.Signals = signal.SIGINT) -> str:
        """Sends ``sig`` and waits for the end (a kill after ``STOP_SECONDS``); returns its output."""
        await asyncio.to_thread(self.stop_blocking, sig)
        return self.output()

    def stop_blocking(self, sig: signal.Signals = signal.SIGINT) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Gateways:
    """Starts gateways whose output goes under ``logs``; ``close`` stops every one still running."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Served] = []

    async def start(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        nofile: tuple[int, int] | None = None,
        ready: bool = True,
    ) -> Served:
        """``args`` follow ``serve``; ``env`` adds to this process's environment; ``nofile`` is the
        (soft, hard) descriptor limit it starts with; ``ready=False`` returns before /health answers."""
        port = free_port()
        log = self.logs / f"gateway-{len(self.started)}-{port}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
                cwd=ROOT,
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=None if nofile is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile),
            )
        served = Served(f"http://127.0.0.1:{port}", proc, log)
        self.started.append(served)
        if ready:
            await served.healthy()
        return served

    async def close(self) -> None:
        for served in self.started:
            await asyncio.to_thread(served.stop_blocking)


async def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    """The old launchers' wait, while tests that start their own processes still call it."""
    await Served(url, proc, Path(os.devnull)).healthy()

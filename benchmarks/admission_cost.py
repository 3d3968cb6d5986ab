"""Instructions per admission and settlement with Redis limits, counted by callgrind: a request's
``Admission.admit`` and ``release`` (and its share of the settler's and the channel's round trips),
apart from the rest of a request, whose count in ``benchmarks.instructions --redis`` moves by ~0.5%
run to run.

The subject runs the bench's limits (``benchmarks.subjects.gateway_config``: team rpm, tpm, concurrency,
a money and a token budget, a price) against a private ``redis-server``: ``--requests`` admissions,
each released at once with usage, at concurrency 16, after a warm-up. Two runs under callgrind, with
no requests and with them; the difference, per request, is the count. The loop's own work (an
``Ask``, a turn of the loop per request) is in it: about 28k of it (the same loop admitting nothing).

    python -m benchmarks.admission_cost [--requests 4000] [--concurrency 16]

``--concurrency 1``: one team key's requests back to back, each after the last was answered (a
client at concurrency 1), where admissions made ahead (``gateway.limits.advance``) serve most of them.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from benchmarks.instructions import wait_port
from benchmarks.procs import free_port
from benchmarks.subjects import gateway_config
from gateway.dialects.openai.parse import parse_chat
from gateway.limits import build_admission
from gateway.limits.admission import Admission, Ask, running
from gateway.runtime.config_file import load_config
from gateway.store.redis_client import close_redis, redis_client

CONCURRENCY = 16
WARMUP = 100  # per worker


async def _work(admission: Admission, team: str, target: str, requests: int, concurrency: int) -> int:
    """``requests`` admitted and released at ``concurrency`` (priced as answered by ``target``); answers
    how many were admitted."""
    request = parse_chat({"model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": "Say hello"}]})
    upstream = types.SimpleNamespace(name=target)  # what the price lookup reads of a target
    admitted = [0]

    async def worker(count: int) -> None:
        for _ in range(count):
            ask = Ask(team, "key-1", request, None, None, admission.policies, "tiny", (upstream,))
            plan = await admission.admit(ask)
            admitted[0] += 1
            await asyncio.sleep(0)  # the answer's turn
            admission.release(plan, 10, 16, model="tiny", target=target)

    await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
    return admitted[0]


async def inner(redis_url: str, requests: int, concurrency: int = CONCURRENCY) -> int:
    """The subject: a warm-up, then ``requests`` admissions and releases; answers those admitted."""
    path = Path(tempfile.mkdtemp(prefix="gw-admission-")) / "gateway.yaml"
    path.write_text(gateway_config(9, redis_url))  # the upstream is never called
    config = load_config(path)
    assert config.redis is not None
    client = redis_client(config.redis)
    admission = build_admission(config, client)
    try:
        model = config.models[0]
        first = model.targets[0]
        team, target = config.teams[0].id, first.name or f"{first.provider}:{first.model or model.name}"
        async with running(admission):
            await _work(admission, team, target, WARMUP * concurrency, concurrency)
            return await _work(admission, team, target, requests, concurrency)
    finally:
        await close_redis(client)


def _count(redis_url: str, requests: int, concurrency: int) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    cmd += [sys.executable, "-m", "benchmarks.admission_cost", "--inner", redis_url, "--requests", str(requests)]
    cmd += ["--concurrency", str(concurrency)]
    err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    return int(err.rsplit("Collected : ", 1)[1].split()[0])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--concurrency", type=int, default=CONCURRENCY)
    p.add_argument("--inner", metavar="REDIS_URL", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.inner:
        asyncio.run(inner(a.inner, a.requests, a.concurrency))
        return
    if shutil.which("valgrind") is None or shutil.which("redis-server") is None:
        raise SystemExit("valgrind and redis-server are needed")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
    )
    try:
        wait_port(port)
        url = f"redis://127.0.0.1:{port}/0"
        none, some = _count(url, 0, a.concurrency), _count(url, a.requests, a.concurrency)
    finally:
        server.terminate()
        server.wait()
    print(f"admit and release: {(some - none) / a.requests / 1000:.1f}k instructions per request")


if __name__ == "__main__":
    main()

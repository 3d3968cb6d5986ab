"""Micro-benchmarks behind ``gateway/runtime/internals.py``: each below-the-API path against the
public API it replaces, in CPU time per call of this process (the client's own cost; Redis's is
apart). ``python -m benchmarks.internals [--redis-port 6379] [--rounds 5]``; the figures are in
docs/performance.md. Needs a Redis on loopback for the Redis rows."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from gateway.limits.channel import ScriptChannel
from gateway.runtime import internals

KEY = "gwk_" + "x" * 40
SCRIPT = "return redis.call('INCR', KEYS[1])"  # Redis's own work kept small: the client's cost shows


def per_call(fn: Callable[[], object], n: int = 200_000) -> float:
    began = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - began) / n * 1e6


def digests() -> dict[str, float]:
    """hashlib's SHA-256 against CPython's own module (``_sha2`` from 3.12, ``_sha256`` before), which
    the gateway used until this measurement."""
    key = KEY.encode()
    rows = {"hashlib.sha256": per_call(lambda: hashlib.sha256(key).digest())}
    for private in ("_sha2", "_sha256"):
        with contextlib.suppress(ImportError):
            own = importlib.import_module(private).sha256
            rows[f"{private}.sha256"] = per_call(lambda own=own: own(key).digest())
            break
    return rows


async def timed(batch: Callable[[], Awaitable[object]], calls: int, rounds: int = 400) -> float:
    await batch()  # connect, load the script
    began = time.process_time()
    for _ in range(rounds):
        await batch()
    return (time.process_time() - began) / (rounds * calls) * 1e6


async def scripts(port: int, size: int) -> dict[str, float]:
    client: Any = Redis(host="127.0.0.1", port=port)
    script = client.register_script(SCRIPT)
    await script(keys=["bench:internals"], args=[1])
    channel = ScriptChannel(client)
    head = internals.evalsha_head(script.sha.encode(), [b"bench:internals"], 1)

    def through_channel() -> Awaitable[object]:
        return asyncio.gather(*[channel.evalsha(head, b"1") for _ in range(size)])

    async def through_pipeline() -> object:
        pipe = client.pipeline(transaction=False)
        for _ in range(size):
            pipe.evalsha(script.sha, 1, "bench:internals", 1)
        return await pipe.execute()

    def one_by_one() -> Awaitable[object]:
        return asyncio.gather(*[script(keys=["bench:internals"], args=[1]) for _ in range(size)])

    try:
        return {
            f"channel, {size} a round trip": await timed(through_channel, size),
            f"pipeline, {size} a round trip": await timed(through_pipeline, size),
            f"script(), {size} at once": await timed(one_by_one, size),
        }
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-port", type=int, default=6379)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    runs: dict[str, list[float]] = {}
    for _ in range(opts.rounds):  # interleaved: each round measures every row once
        rows = digests()
        for size in (1, 16):
            rows |= asyncio.run(scripts(opts.redis_port, size))
        for name, value in rows.items():
            runs.setdefault(name, []).append(value)
    for name, values in runs.items():
        print(
            f"{name:32} median {statistics.median(values):8.2f} µs/call  (min {min(values):.2f}, max {max(values):.2f})"
        )


if __name__ == "__main__":
    main()

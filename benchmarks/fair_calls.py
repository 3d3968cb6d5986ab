"""The client's CPU per request of a never-full shared queue (docs/fair-queuing.md): a slot taken and
given back through Redis (``SharedQueue.enter``, ``Slot.release``), its script calls made through
redis-py's script object or packed on a ``ScriptChannel`` (the gateway's since 761b3e6), one request
at a time and 16 at once. CPU time of this process only (``time.process_time``): Redis's own work is
not counted, nor is anything else the gateway does per request.

    python -m benchmarks.fair_calls [--redis-url redis://127.0.0.1:6379/0] [--requests 3000] [--rounds 2]

About 10 s of CPU; it writes keys ``gw:fq:{<random>}:*`` (their leases run out).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
import uuid

import redis.asyncio as aioredis

from gateway.limits.channel import ScriptChannel
from gateway.limits.fairq import QueueSettings, Ticket
from gateway.limits.fairq_shared import Shared, SharedQueue

ids = itertools.count()


async def per_request(client: aioredis.Redis, calls: ScriptChannel | None, requests: int, at_once: int) -> float:
    """Microseconds of this process's CPU per request: a slot taken, then given back."""
    shared = Shared(client, uuid.uuid4().hex, 2, 30_000, calls)
    queue = SharedQueue(uuid.uuid4().hex, QueueSettings(1_000_000, 64, 30.0), 2, shared, False, 1.0)

    async def user(n: int) -> None:
        for _ in range(n):
            slot = await queue.enter(Ticket(f"r{next(ids)}", "t", "t", "interactive", 0), lambda: None)
            slot.release()

    await asyncio.gather(*(user(50) for _ in range(at_once)))  # warm-up
    await asyncio.gather(*queue.tasks)
    began = time.process_time()
    await asyncio.gather(*(user(requests // at_once) for _ in range(at_once)))
    await asyncio.gather(*queue.tasks)
    return (time.process_time() - began) / (requests // at_once * at_once) * 1e6


async def measure(url: str, requests: int, rounds: int) -> None:
    client = aioredis.Redis.from_url(url)
    print("| calls | at once | client CPU µs per request, each round |")
    print("|---|---:|---|")
    try:
        for packed in (False, True):
            for at_once in (1, 16):
                figures = []
                for _ in range(rounds):
                    calls = ScriptChannel(client) if packed else None
                    figures.append(await per_request(client, calls, requests, at_once))
                name = "packed (ScriptChannel)" if packed else "redis-py script object"
                print(f"| {name} | {at_once} | {', '.join(f'{f:.0f}' for f in figures)} |")
    finally:
        await client.aclose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    asyncio.run(measure(args.redis_url, args.requests, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())

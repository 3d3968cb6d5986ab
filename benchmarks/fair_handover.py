"""Where a queued request's wait goes with the shared queue alone (no HTTP, no pool): two
``SharedQueue``s, each with its own Redis client and listener as two gateways have, on a private
``redis-server``; a noisy team floods them (5x the slots' rate), a quiet team arrives at 0.3x, every
slot is held for the service time, then released:

    .venv/bin/python -m benchmarks.fair_handover [--seconds 20] [--spread 0.5]

Per quiet request: its wait; the releases between its arrival and its grant (1 when it was the head
of the order, more when it went behind others); the time from the last of those releases to its
grant (the hand-over: the releasing call, the script's promotion, the message, the waiter waking);
and whether the message or the 0.5 s poll granted it. ``--spread`` draws each service time uniformly
within ``±spread`` of the mean: with one fixed service time the slots free in step, and a wait is
up to a whole service time, whatever the order. Prints the figures; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from benchmarks.procs import percentile
from gateway.core.errors import GatewayError
from gateway.limits import fairq_shared as fs
from gateway.limits.fairq import QueueSettings, Ticket
from tests.support.redis_servers import RedisServer

MODEL = "m"


@dataclass
class Record:
    """What the run saw: release times, and per quiet grant its figures."""

    releases: list[float] = field(default_factory=list)
    quiet: list[tuple[float, int, float, str]] = field(default_factory=list)  # wait, releases, hand-over, path
    noisy: list[float] = field(default_factory=list)
    shed: Counter[str] = field(default_factory=Counter)
    told: set[str] = field(default_factory=set)  # request ids a message granted


def watch_messages(record: Record) -> None:
    """Notes which grants came by message (the rest came by a poll)."""
    park = fs.Shared.park

    async def watched(self: fs.Shared, rid: str, seconds: float) -> int | None:
        told = await park(self, rid, seconds)
        if told is not None:
            record.told.add(rid)
        return told

    fs.Shared.park = watched  # type: ignore[method-assign]


async def one(queue: fs.SharedQueue, team: str, service: float, record: Record) -> None:
    began = time.perf_counter()
    ticket = Ticket(uuid.uuid4().hex, team, team, "interactive", 0)
    try:
        slot = await queue.enter(ticket, lambda: None)
    except GatewayError:
        record.shed[team] += 1
        return
    now = time.perf_counter()
    if team == "quiet":
        between = [r for r in record.releases if began <= r <= now]
        since = now - (between[-1] if between else began)
        record.quiet.append((now - began, len(between), since, "message" if ticket.rid in record.told else "poll"))
    else:
        record.noisy.append(now - began)
    await asyncio.sleep(service)
    record.releases.append(time.perf_counter())
    slot.release()


async def arrivals(
    queues: list[fs.SharedQueue], team: str, rate: float, args: argparse.Namespace, record: Record, seed: int
) -> None:
    rng = random.Random(seed)
    tasks: list[asyncio.Task[None]] = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        await asyncio.sleep(rng.expovariate(rate))
        service = args.service * (1 + args.spread * (2 * rng.random() - 1))
        tasks.append(asyncio.create_task(one(queues[len(tasks) % 2], team, service, record)))
    await asyncio.gather(*tasks)


async def run(args: argparse.Namespace, url: str) -> Record:
    record = Record()
    watch_messages(record)
    settings = QueueSettings(args.capacity, 64, 10.0, args.capacity // 2)
    clients: list[Any] = []
    queues: list[fs.SharedQueue] = []
    listeners: list[fs.Listener] = []
    for _ in range(2):  # two gateways: each its own client, queue and listener
        client = aioredis.Redis.from_url(url)
        shared = fs.Shared(client, MODEL, 2, 30_000)
        queue = fs.SharedQueue(MODEL, settings, 2, shared, closed=False, retry_seconds=1.0)
        listener = fs.Listener(client, lambda q=queue: {MODEL: q})  # type: ignore[misc]
        listener.start()
        clients.append(client)
        queues.append(queue)
        listeners.append(listener)
    await asyncio.sleep(0.2)  # the listeners subscribed
    rate = args.capacity / args.service
    await asyncio.gather(
        arrivals(queues, "noisy", 5 * rate, args, record, 1), arrivals(queues, "quiet", 0.3 * rate, args, record, 2)
    )
    for listener in listeners:
        await listener.close()
    for client in clients:
        await client.aclose()
    return record


def report(record: Record, args: argparse.Namespace) -> None:
    waits = sorted(w for w, *_ in record.quiet)
    hand = sorted(h for _, n, h, _ in record.quiet if n)
    turnover = args.service / args.capacity
    print(
        f"service {args.service * 1000:.0f} ms ±{args.spread:.0%}, {args.capacity} slots: "
        f"turnover {turnover * 1000:.0f} ms"
    )
    print(
        f"quiet: {len(waits)} granted, {record.shed['quiet']} shed; wait p50 {percentile(waits, 50) * 1000:.0f} ms, "
        f"p99 {percentile(waits, 99) * 1000:.0f} ms, max {waits[-1] * 1000:.0f} ms"
    )
    print("quiet: releases before its grant:", dict(sorted(Counter(n for _, n, _, _ in record.quiet).items())))
    print("quiet: granted by", dict(Counter(p for *_, p in record.quiet)))
    if hand:
        print(
            f"hand-over (last release to grant): p50 {percentile(hand, 50) * 1000:.1f} ms, "
            f"p99 {percentile(hand, 99) * 1000:.1f} ms, mean {statistics.fmean(hand) * 1000:.1f} ms"
        )
    print(f"noisy: {len(record.noisy)} granted, {record.shed['noisy']} shed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--service", type=float, default=0.418, help="mean seconds a slot is held")
    parser.add_argument("--spread", type=float, default=0.0, help="service times uniform within ±spread")
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        report(asyncio.run(run(args, server.url)), args)
    finally:
        server.close()


if __name__ == "__main__":
    main()

"""Choosing a replica (sans-IO): load, staleness, availability, session and prefix affinity."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from backends.pool.balance import KV_WEIGHT, Balancer, PrefixIndex, ReplicaState, block_hashes, prefer
from backends.pool.replicas import read_gauges, server_root
from gateway.core.request import ChatMessage, InternalRequest, Operation
from gateway.runtime.config import Balance

NOW = 1000.0


def pool(n: int, **settings: object) -> Balancer:
    states = [ReplicaState(f"http://10.0.0.{i}:8000/v1", f"r{i}") for i in range(n)]
    return Balancer(states, Balance.model_validate(settings))


def completion(prompt: str = "hi", user: str | None = None) -> InternalRequest:
    return InternalRequest(Operation.COMPLETION, model="m", prompts=(prompt,), user=user)


def scraped(state: ReplicaState, running: float = 0, waiting: float = 0, kv: float = 0, at: float = NOW) -> None:
    state.running, state.waiting, state.kv_usage, state.scraped_at = running, waiting, kv, at


def test_least_loaded_first_and_ties_shared() -> None:
    b = pool(3)
    b.replicas[0].in_flight = 5
    b.replicas[1].in_flight = 1
    b.replicas[2].in_flight = 3
    assert b.order(completion(), None, NOW)[0] == [1, 2, 0]
    even = pool(2)
    firsts = Counter(even.order(completion(), None, NOW)[0][0] for _ in range(400))
    assert min(firsts.values()) > 120, firsts  # random tie-breaking, not always replica 0


def test_engine_gauges_count_while_fresh_only() -> None:
    b = pool(2, stale_after=5.0)
    scraped(b.replicas[0], running=4, waiting=3)  # other gateways' requests: load 4+3+3 = 10
    b.replicas[1].in_flight = 2
    assert b.replicas[0].load(NOW, 5.0) == 10
    assert b.order(completion(), None, NOW)[0] == [1, 0]
    scraped(b.replicas[0], running=4, waiting=3, at=NOW - 6)  # too old: only our own count (0)
    assert b.order(completion(), None, NOW)[0] == [0, 1]
    b.replicas[0].slow_scrapes = 2  # but too busy to answer its scrapes: its last gauges still count
    assert b.replicas[0].load(NOW, 5.0) == 12 and b.order(completion(), None, NOW)[0] == [1, 0]


def test_a_replica_whose_scrapes_time_out_is_loaded_even_with_fresh_gauges() -> None:
    # its last good scrape (idle) came just before a rush that now keeps its /metrics from answering
    b = pool(2, stale_after=5.0)
    scraped(b.replicas[0], at=NOW - 1)
    scraped(b.replicas[1], at=NOW - 1)
    b.replicas[0].slow_scrapes = 1
    assert b.replicas[0].load(NOW, 5.0) == 1
    assert all(b.order(completion(), None, NOW)[0] == [1, 0] for _ in range(50))


def test_in_flight_covers_requests_sent_since_the_scrape() -> None:
    state = ReplicaState("http://x/v1", "x")
    scraped(state, running=1)
    state.in_flight = 6
    assert state.load(NOW, 5.0) == 6
    scraped(state, running=1, kv=1.0)
    state.in_flight = 0
    assert state.load(NOW, 5.0) == 1 + KV_WEIGHT


def test_unhealthy_and_cooling_replicas_go_last() -> None:
    b = pool(3)
    b.replicas[0].healthy = False
    b.replicas[1].cool_until = NOW + 1
    b.replicas[2].in_flight = 50
    assert b.order(completion(), None, NOW)[0][0] == 2
    assert set(b.order(completion(), None, NOW)[0][1:]) == {0, 1}
    assert b.order(completion(), None, NOW + 2)[0][0] == 1  # cool-down over


def test_session_sticks_and_moves_only_when_its_replica_goes() -> None:
    b = pool(4)
    homes = {f"s{i}": b.order(completion(), f"s{i}", NOW)[0][0] for i in range(40)}
    assert len(set(homes.values())) >= 3  # sessions spread over replicas
    assert all(b.order(completion(), s, NOW)[0][0] == home for s, home in homes.items())
    gone = homes["s0"]
    b.replicas[gone].healthy = False
    moved = {s: b.order(completion(), s, NOW)[0][0] for s in homes}
    assert all(moved[s] == home for s, home in homes.items() if home != gone)  # rendezvous: only its sessions
    assert moved["s0"] != gone
    # The user id stands in for a session; the same across processes (a stable hash, not hash()).
    assert pool(4).order(completion(user="alice"), None, NOW)[0][0] == pool(4).order(completion(), "alice", NOW)[0][0]


def test_affinity_yields_to_load_beyond_the_slack() -> None:
    b = pool(2, affinity_slack=2)
    home = b.order(completion(), "s", NOW)[0][0]
    b.replicas[home].in_flight = 2
    assert b.order(completion(), "s", NOW)[0][0] == home
    b.replicas[home].in_flight = 3
    assert b.order(completion(), "s", NOW)[0][0] == 1 - home


def test_prefix_affinity_follows_shared_leading_blocks() -> None:
    b = pool(3, prefix_block_chars=16)
    system = "You are a helpful assistant. " * 4
    order, hashes = b.order(completion(system + "What is 2+2?"), None, NOW)
    b.record(hashes, order[0])
    home = order[0]
    for other in (i for i in range(3) if i != home):
        b.replicas[other].in_flight = 0
    b.replicas[home].in_flight = 1  # within the slack: the warm cache wins
    assert b.order(completion(system + "And 3+3?"), None, NOW)[0][0] == home
    b.replicas[home].in_flight = 0
    fresh = Counter(b.order(completion("unrelated " * 20), None, NOW)[0][0] for _ in range(300))
    assert len(fresh) == 3  # no shared prefix: plain least-loaded with random ties


def test_prefix_affinity_for_chat_transcripts() -> None:
    b = pool(3, prefix_block_chars=8)
    history = (ChatMessage("system", "Answer briefly and politely."), ChatMessage("user", "Hello there"))
    first = InternalRequest(Operation.CHAT, model="m", messages=history)
    order, hashes = b.order(first, None, NOW)
    b.record(hashes, order[0])
    longer = InternalRequest(Operation.CHAT, model="m", messages=(*history, ChatMessage("assistant", "Hi! " * 5)))
    assert all(b.order(longer, None, NOW)[0][0] == order[0] for _ in range(50))


def test_block_hashes_are_chained_and_full_blocks_only() -> None:
    a = block_hashes("abcdefgh" * 3 + "xy", 8)
    b = block_hashes("abcdefgh" * 3 + "zz", 8)
    c = block_hashes("Xbcdefgh" + "abcdefgh" * 2, 8)
    assert len(a) == 3 and a == b  # the partial tail block is not cached by engines
    assert a[1] != c[1] and a[2] != c[2]  # a different first block changes every later hash


def test_block_hashes_are_the_same_in_every_process() -> None:
    """Gateway replicas share them (kv-shared): ``hash()`` of a str would differ per process."""
    code = "from backends.pool.balance import block_hashes; print(block_hashes('abcdefgh' * 3, 8))"
    run = [sys.executable, "-c", code]
    outs = {
        subprocess.run(
            run, env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True, check=True
        ).stdout
        for seed in ("1", "7")
    }
    assert outs == {f"{block_hashes('abcdefgh' * 3, 8)}\n"}


def test_round_robin_takes_turns_and_ignores_affinity() -> None:
    b = pool(3, strategy="round-robin")
    firsts = [b.order(completion("same prompt " * 20), "session", NOW)[0][0] for _ in range(6)]
    assert sorted(firsts) == [0, 0, 1, 1, 2, 2] and firsts[:3] == firsts[3:]
    b.replicas[1].healthy = False
    assert {b.order(completion(), None, NOW)[0][0] for _ in range(4)} == {0, 2}


def test_least_loaded_ignores_affinity() -> None:
    b = pool(2, strategy="least-loaded")
    system = "You are a helpful assistant. " * 10
    order, hashes = b.order(completion(system + "a"), "s", NOW)
    assert hashes == []  # nothing to record: no prefix index
    b.replicas[order[0]].in_flight = 1
    assert b.order(completion(system + "b"), "s", NOW)[0][0] == order[1]


def test_prefix_index_is_bounded_lru_and_forgets_a_replica() -> None:
    index = PrefixIndex(capacity=4)
    index.record([1, 2, 3], replica=0)
    index.record([7, 8], replica=1)
    assert len(index) == 4 and index.lookup([1, 2, 3], [0, 1]) == ({}, {})  # block 1 was evicted
    assert index.lookup([7, 8, 9], [0, 1]) == ({1: 2}, {1: 1})
    index.forget(1)
    assert index.lookup([7], [0, 1]) == ({}, {}) and index.lookup([2, 3], [0, 1]) == ({0: 2}, {0: 1})


def test_prefix_index_keeps_every_replica_a_prefix_went_to() -> None:
    index = PrefixIndex(capacity=100)
    for _ in range(3):
        index.record([1, 2, 3], replica=0)
    index.record([1, 2], replica=1)  # one request yielded to load
    depth, uses = index.lookup([1, 2, 3, 4], [0, 1, 2])
    assert depth == {0: 3, 1: 2} and uses == {0: 3, 1: 1}
    assert prefer([2, 1, 0], depth, uses, {}) == 0  # the deepest
    assert prefer([2, 1], depth, uses, {}) == 1  # the deepest of those allowed
    index.record([1, 2, 3], replica=1)
    depth, uses = index.lookup([1, 2, 3], [1, 0])
    assert prefer([1, 0], depth, uses, {1: 0, 0: 9}) == 0  # equal depth: its home, not the later copy
    assert prefer([2, 1], {}, {}, {}) == 2  # nothing cached: the first candidate
    assert prefer([2, 1], {}, {}, {2: 3, 1: 1}) == 1  # a new prefix: the replica home to the fewest


def test_new_prefixes_are_shared_out_whatever_the_session() -> None:
    b = pool(2, prefix_block_chars=8)
    homes = {}
    for k in range(10):
        order, hashes = b.order(completion(f"{k:02d} system prompt " * 2), "one session", NOW)
        b.record(hashes, order[0])
        homes[k] = order[0]
    assert Counter(homes.values()) == {0: 5, 1: 5}
    assert all(b.order(completion(f"{k:02d} system prompt " * 3), None, NOW)[0][0] == homes[k] for k in homes)


def test_new_prefixes_share_out_the_recent_placements_not_the_whole_history() -> None:
    b = pool(2, prefix_block_chars=8, affinity_slack=1)

    def place(k: int) -> int:
        order, hashes = b.order(completion(f"{k:03d} conversation " * 2), None, NOW)
        b.record(hashes, order[0])
        return order[0]

    b.replicas[1].in_flight = 5  # too busy for affinity: twelve conversations start on replica 0
    assert {place(k) for k in range(12)} == {0}
    b.replicas[1].in_flight = 0
    # Counting every placement ever, the next twelve would all go to replica 1; the early ones have faded.
    later = [place(k) for k in range(12, 24)]
    assert later[:2] == [1, 1] and Counter(later) == {0: 5, 1: 7}


def test_read_gauges_picks_the_load_lines() -> None:
    text = "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="tiny"} 2.0',
            'vllm:num_requests_running{engine="1",model_name="tiny"} 1.0',
            'vllm:num_requests_waiting{engine="0",model_name="tiny"} 3.0',
            'vllm:num_requests_waiting_by_reason{reason="capacity"} 9.0',
            'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25',
            'vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.5',
            'vllm:time_to_first_token_seconds_bucket{le="0.001"} 4.0',
            "vllm:gpu_cache_usage_perc 0.125 1700000000000",
        ]
    )
    assert read_gauges(text) == {"running": 3.0, "waiting": 3.0, "kv_usage": 0.5}
    assert read_gauges("garbage\nvllm:num_requests_running{x} notanumber\n") == {}
    assert server_root("http://h:8000/v1") == "http://h:8000"

"""The routing benchmark's offline oracles, its per-phase figures, its gateways' config and its verdicts
(sans-IO parts of ``benchmarks/routing.py`` and ``benchmarks/routing_oracle.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.routing import JUDGED, POOLS, Phase, gateway_config, parse_args, phase_figures, render
from benchmarks.routing_oracle import bounded_rate
from benchmarks.routing_oracle import unbounded_rate as oracle_rate
from gateway.runtime.config import parse_config
from tests.vllm import server


def test_the_oracle_counts_shared_full_blocks_only() -> None:
    system = list(range(10))  # two full blocks of 4, and two tokens more
    first = [*system, 100, 101]  # 12 tokens: nothing cached yet
    second = [*system, 200, 201, 202]  # 13 tokens: blocks 1 and 2 shared, block 3 differs
    third = list(first)  # the same prompt again: 2 usable blocks only (the last token is computed)
    assert oracle_rate([first], 4) == 0.0
    assert oracle_rate([first, second, third], 4) == (0 + 8 + 8) / (12 + 13 + 12)


def test_the_oracle_needs_the_prefix_not_just_a_block() -> None:
    a = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    b = [9, 9, 9, 9, 5, 6, 7, 8, 9]  # its second block equals a's, its first does not
    assert oracle_rate([a, b], 4) == 0.0


def test_the_bounded_oracle_partitions_what_one_cache_cannot_hold() -> None:
    a, b = [1] * 8 + [2], [3] * 8 + [4]  # two prompts of two full blocks of 4 (the last token aside)
    prompts = [a, b] * 10
    # One cache of two blocks: each prompt evicts the other; two such caches: one prompt each.
    assert bounded_rate(prompts, 4, replicas=1, capacity=2) == 0.0
    assert bounded_rate(prompts, 4, replicas=2, capacity=2) == 18 * 8 / (20 * 9)
    # Unbounded, or roomy enough, it is the unbounded oracle.
    assert bounded_rate(prompts, 4, replicas=1, capacity=4) == oracle_rate(prompts, 4)


def test_the_bounded_oracle_keeps_the_load_bound() -> None:
    same = [[7] * 9] * 12  # one hot prompt: all on one replica would be 2x the mean
    held = bounded_rate(same, 4, replicas=2, capacity=8, max_load=1.5)
    free = bounded_rate(same, 4, replicas=2, capacity=8, max_load=2.0)
    # Under 1.5x, one replica takes 7 (after its first miss, 6 hits), the other 5 (4 hits).
    assert held == 10 * 8 / (12 * 9) and free == 11 * 8 / (12 * 9)


prompt_lists = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=24), max_size=30)


@given(prompt_lists, st.integers(1, 4), st.integers(1, 12), st.sampled_from([2, 4]))
def test_no_bounded_cache_beats_the_unbounded_one(prompts: list[list[int]], n: int, cap: int, block: int) -> None:
    assert bounded_rate(prompts, block, n, cap) <= oracle_rate(prompts, block)


@given(prompt_lists, st.sampled_from([2, 4]))
def test_one_cache_large_enough_is_the_unbounded_oracle(prompts: list[list[int]], block: int) -> None:
    assert bounded_rate(prompts, block, 1, 10_000) == oracle_rate(prompts, block)


def test_phase_figures_are_counter_deltas_summed_over_replicas() -> None:
    phase = Phase(ttft=[0.01, 0.02, 0.03, 0.04], tokens=64, wall=2.0)
    before = [
        {
            "vllm:prefix_cache_hits_total": 10.0,
            "vllm:prefix_cache_queries_total": 100.0,
            "vllm:request_success_total": 5.0,
        }
    ] * 2
    after = [
        {
            "vllm:prefix_cache_hits_total": 40.0,
            "vllm:prefix_cache_queries_total": 200.0,
            "vllm:request_success_total": 8.0,
        },
        {
            "vllm:prefix_cache_hits_total": 20.0,
            "vllm:prefix_cache_queries_total": 200.0,
            "vllm:request_success_total": 6.0,
        },
    ]
    got = phase_figures(phase, before, after)
    assert got["hit_rate"] == round(40 / 200, 3)
    assert got["per_replica"] == [3.0, 1.0] and got["imbalance"] == 1.5
    assert got["req_s"] == 2.0 and got["output_tok_s"] == 32.0


def test_every_pool_is_a_valid_config_and_only_events_reads_the_events(tmp_path: Path) -> None:
    def replica(i: int) -> server.VLLM:
        base = f"http://127.0.0.1:{8001 + i}"
        events, replay = f"ipc://{tmp_path}/kv{i}", f"ipc://{tmp_path}/replay{i}"
        return server.VLLM(base, base + "/v1", server.MODEL, server.SERVED_NAME, tmp_path, 0, events, replay)

    vllms = [replica(0), replica(1)]
    config = parse_config(gateway_config(vllms, "redis://127.0.0.1:6379", 8080, parse_args([])))
    balances = {m.name: m.targets[0].balance for m in config.models}
    assert list(balances) == list(POOLS)
    assert {name: b.strategy for name, b in balances.items()} == {name: p.strategy for name, p in POOLS.items()}
    events = balances.pop("events").kv_events
    assert events is not None and events.tokenizer == str(server.MODEL)
    assert events.endpoints == (f"ipc://{tmp_path}/kv0", f"ipc://{tmp_path}/kv1")
    assert events.replay_endpoints == (f"ipc://{tmp_path}/replay0", f"ipc://{tmp_path}/replay1")
    assert all(b.kv_events is None for b in balances.values())


def figures(hit: float, ttft: float, imbalance: float) -> dict[str, Any]:
    return {
        "requests": 10,
        "hit_rate": hit,
        "ttft_p50_ms": ttft,
        "ttft_p99_ms": ttft * 2,
        "req_s": 1.0,
        "output_tok_s": 16.0,
        "per_replica": [5.0, 5.0],
        "imbalance": imbalance,
    }


def report(systems: int) -> dict[str, Any]:
    def workload() -> dict[str, Any]:
        w = {alias: figures(0.2, 100.0, 1.0) for alias in POOLS}
        w["kv"] = figures(0.3, 90.0, 1.2) | {"home_share": 0.9, "homes": [8, 8], "fallbacks": 2}
        w["events"] = figures(0.45, 120.0, 1.6)
        return w | {"oracle_hit_rate": 0.6, "bounded_oracle_hit_rate": 0.5}

    meta = {"date": "d", "cpu_model": "c", "nproc": 2, "memory_gib": 24, "git": "g", "command": "x", "note": "n"}
    return {"meta": meta | {"vllm": "v"}, "systems": systems, "workloads": {"system": workload(), "chat": workload()}}


def test_the_verdicts_judge_both_kv_strategies_against_every_goal() -> None:
    text = render(report(28))
    verdicts = [line for line in text.splitlines() if line.startswith("* ")]
    assert len(verdicts) == len(JUDGED) * 3  # the hit rate on the system workload; TTFT and load per workload
    kv, events = verdicts[0], verdicts[1]
    assert kv.startswith("* system, 28 shared prompts: kv-shared hits 30.0%")
    assert "60% of the bounded oracle's 50.0% (goal ≥ 90%: not met" in kv and "1.5x round-robin's" in kv
    assert "(goal ≥ 2x: not met)" in kv
    assert events.startswith("* system, 28 shared prompts: kv-shared + kv_events hits 45.0%")
    assert "90% of the bounded oracle's 50.0% (goal ≥ 90%: met;" in events and "(goal ≥ 2x: met)" in events
    kv_chat, events_chat = (line for line in verdicts if line.startswith("* chat"))
    assert "TTFT p50 90.0 ms against round-robin's 100.0 ms (goal lower: met)" in kv_chat
    assert "busiest replica 1.2x the mean (goal ≤ 1.5x: met)" in kv_chat and "2 fallbacks" in kv_chat
    assert "(goal lower: not met)" in events_chat and "(goal ≤ 1.5x: not met)" in events_chat
    assert "| chat | kv-shared + kv_events | 10 | 45.0% |" in text


def test_out_and_name_place_the_results_side_by_side() -> None:
    args = parse_args(["--systems", "28", "--out", "/tmp/x", "--name", "routing-pressure"])
    assert (args.systems, args.out, args.name) == (28, Path("/tmp/x"), "routing-pressure")
    assert parse_args([]).name == "routing"

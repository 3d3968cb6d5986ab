"""The routing benchmark's offline oracles, its per-phase figures, its gateways' config, its arguments
and its verdicts (the sans-IO parts of ``benchmarks/routing*.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.routing import (
    MAX_NUM_SEQS,
    engine_cores,
    gateway_config,
    memory_refusal,
    note,
    parse_args,
    phase_figures,
)
from benchmarks.routing_oracle import bounded_rate, round_robin_rate, working_set
from benchmarks.routing_oracle import unbounded_rate as oracle_rate
from benchmarks.routing_report import JUDGED, POOLS, render
from benchmarks.routing_workloads import WORKLOADS, Phase, documents_for
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


@given(prompt_lists, st.integers(1, 8), st.integers(1, 12), st.sampled_from([2, 4]))
def test_no_bounded_cache_beats_the_unbounded_one(prompts: list[list[int]], n: int, cap: int, block: int) -> None:
    assert bounded_rate(prompts, block, n, cap) <= oracle_rate(prompts, block)
    assert round_robin_rate(prompts, block, n, cap) <= oracle_rate(prompts, block)


@given(prompt_lists, st.integers(1, 8), st.sampled_from([2, 4]))
def test_caches_that_never_evict_reach_the_ceiling_on_any_number_of_replicas(
    prompts: list[list[int]], n: int, block: int
) -> None:
    # Each prefix stays where its first block went, so the replicas together are one cache.
    assert bounded_rate(prompts, block, n, 10_000, max_load=float("inf")) == oracle_rate(prompts, block)


def test_more_replicas_can_lower_the_greedy_oracle() -> None:
    # Why the oracle is not claimed to rise with the replicas: a new prefix goes to the replica with the
    # fewest requests, and with four replicas that is the one holding [1, 0], which it evicts before
    # [1, 0, 0] comes; with three it goes elsewhere. Blocks of 2 tokens, caches of one block.
    prompts = [[1, 0], [0], [0], [0], [0, 0], [1, 0, 0]]
    unbound = float("inf")
    assert bounded_rate(prompts, 2, 3, 1, unbound) == 2 / 10 and bounded_rate(prompts, 2, 4, 1, unbound) == 0.0


@given(prompt_lists, st.integers(1, 12), st.sampled_from([2, 4]))
def test_one_replica_has_no_choice_to_make(prompts: list[list[int]], cap: int, block: int) -> None:
    assert round_robin_rate(prompts, block, 1, cap) == bounded_rate(prompts, block, 1, cap)


def test_round_robin_keeps_every_prefix_everywhere() -> None:
    # Three prompts of two full blocks of 4 (the last token aside), over and over, on two replicas.
    a, b, c = [1] * 8 + [0], [2] * 8 + [0], [3] * 8 + [0]
    prompts = [a, b, c] * 10
    assert working_set(prompts, 4) == 6
    # Caches of 4 blocks (two prompts) each: round-robin shows every replica all three and each
    # evicts the one coming next; split, the three fit in the two caches.
    assert round_robin_rate(prompts, 4, 2, 4) == 0.0
    assert bounded_rate(prompts, 4, 2, 4, max_load=2.0) == 27 * 8 / (30 * 9)
    # Caches that hold all three: only each replica's first sight of each prompt misses.
    assert round_robin_rate(prompts, 4, 2, 6) == (30 - 2 * 3) * 8 / (30 * 9)


def test_the_working_set_counts_shared_blocks_as_prefixes() -> None:
    first, second = [1] * 4 + [2] * 4 + [0], [1] * 4 + [3] * 4 + [0]  # share the first block only
    assert working_set([first], 4) == 0 and working_set([first, second], 4) == 1
    assert working_set([first, first, second], 4) == 2
    assert working_set([[5] * 4 + [1] * 4 + [0], first], 4) == 0  # the same block after another prefix


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

    vllms = [replica(i) for i in range(4)]
    config = parse_config(gateway_config(vllms, "redis://127.0.0.1:6379", 8080, parse_args(["--replicas", "4"])))
    balances = {m.name: m.targets[0].balance for m in config.models}
    assert list(balances) == list(POOLS)
    assert {name: b.strategy for name, b in balances.items()} == {name: p.strategy for name, p in POOLS.items()}
    assert all(len(m.targets[0].replicas) == 4 for m in config.models)
    events = balances.pop("events").kv_events
    assert events is not None and events.tokenizer == str(server.MODEL)
    assert events.endpoints == tuple(f"ipc://{tmp_path}/kv{i}" for i in range(4))
    assert events.replay_endpoints == tuple(f"ipc://{tmp_path}/replay{i}" for i in range(4))
    assert all(b.kv_events is None for b in balances.values())


def figures(hit: float, ttft: float, imbalance: float, replicas: int) -> dict[str, Any]:
    return {
        "requests": 10 * replicas,
        "hit_rate": hit,
        "ttft_p50_ms": ttft,
        "ttft_p99_ms": ttft * 2,
        "req_s": 1.0,
        "output_tok_s": 16.0,
        "per_replica": [10.0] * replicas,
        "imbalance": imbalance,
    }


def report(replicas: int, workloads: tuple[str, ...], rr: float = 0.2, bounded: float = 0.5) -> dict[str, Any]:
    def workload(name: str) -> dict[str, Any]:
        w = {alias: figures(rr, 100.0, 1.0, replicas) for alias in POOLS}
        w["kv"] = figures(0.3, 90.0, 1.2, replicas) | {"home_share": 0.9, "homes": [8, 0], "fallbacks": 2}
        w["events"] = figures(0.45, 120.0, 1.6, replicas)
        models = {"oracle_hit_rate": 0.6, "bounded_oracle_hit_rate": bounded, "round_robin_model_hit_rate": 0.25}
        probe = {"prefill": {"cold_ms": 30.0, "hit_ms": 12.5}} if name != "chat" else {}
        return w | models | probe | {"working_set_blocks": 84}

    meta = {"date": "d", "cpu_model": "c", "nproc": 2, "memory_gib": 24, "git": "g", "command": "x", "note": "n"}
    return {
        "meta": meta | {"vllm": "v"},
        "replicas": replicas,
        "kv_blocks": 32,
        "capacity": 28,
        "block_size": 128,
        "shared": {"system": 28, "documents": 14},
        "workloads": {name: workload(name) for name in workloads},
    }


def test_the_verdicts_judge_both_kv_strategies_against_every_goal() -> None:
    text = render(report(2, ("system", "chat")))
    verdicts = [line for line in text.splitlines() if line.startswith("* ")]
    # the system workload: its working set, a hit rate per judged strategy, the prefill probe;
    # TTFT and load per workload and judged strategy
    assert len(verdicts) == 1 + len(JUDGED) + 1 + len(JUDGED) * 2
    kv, events = verdicts[1], verdicts[2]
    assert kv.startswith("* system, 28 shared prompts: kv-shared hits 30.0%")
    assert "60% of the bounded oracle's 50.0% (goal ≥ 90%: not met" in kv and "1.5x round-robin's" in kv
    assert "(goal ≥ 2x: not met)" in kv
    assert events.startswith("* system, 28 shared prompts: kv-shared + kv_events hits 45.0%")
    assert "90% of the bounded oracle's 50.0% (goal ≥ 90%: met;" in events and "(goal ≥ 2x: met)" in events
    assert verdicts[3] == (
        "* system: on an idle replica the first token comes 30.0 ms after a prompt never seen, 12.5 ms after "
        "one whose prefix is cached: a hit saves about 17.5 ms of prefill, against round-robin's TTFT p50 of "
        "100.0 ms under load (the rest is queueing)."
    )
    kv_chat, events_chat = (line for line in verdicts if line.startswith("* chat"))
    assert "TTFT p50 90.0 ms against round-robin's 100.0 ms (goal lower: met)" in kv_chat
    assert "busiest replica 1.2x the mean (goal ≤ 1.5x: met)" in kv_chat and "2 fallbacks" in kv_chat
    assert "(goal lower: not met)" in events_chat and "(goal ≤ 1.5x: not met)" in events_chat
    assert "| chat | kv-shared + kv_events | 20 | 45.0% |" in text
    assert "| chat | round-robin (offline, the same LRUs) | | 25.0% |" in text


def test_the_working_set_says_whether_twice_round_robin_is_within_reach() -> None:
    # 84 shared blocks: three times one cache of 28; two replicas hold 56 of them, four all.
    two = render(report(2, ("documents",), bounded=0.45))
    four = render(report(4, ("documents",), bounded=0.8))
    line2 = next(line for line in two.splitlines() if line.startswith("* documents: a working set"))
    line4 = next(line for line in four.splitlines() if line.startswith("* documents: a working set"))
    assert "84 shared blocks of 128 tokens against 28 in one replica's cache and 56 in the 2 replicas'" in line2
    assert "about C/W = 33% of them, an ideal split min(1, N·C/W) = 67%" in line2
    assert "a router keeps at most about 2.0x round-robin's share (never more than N = 2x)" in line2
    assert "round-robin 25.0% and the bounded oracle 45.0% of prompt tokens (1.8x)" in line2
    assert line2.endswith("≥ 2x round-robin is out of reach (it would take 111% of the bounded oracle's rate).")
    assert "and 112 in the 4 replicas' together" in line4 and "min(1, N·C/W) = 100%" in line4
    assert "at most about 3.0x" in line4
    assert line4.endswith(
        "(3.2x): ≥ 2x round-robin is within reach for a router with 62% of the bounded oracle's rate."
    )
    assert "| documents | kv-shared | 40 | 30.0% | 90.0 ms | 180.0 ms | 1.0 | 16.0 | 10 / 10 / 10 / 10 | 1.2 |" in four
    assert "* documents, 14 shared prompts: kv-shared hits 30.0%" in four


def test_the_defaults_are_the_two_replica_run() -> None:
    args = parse_args([])
    assert (args.replicas, args.workloads, args.requests, args.documents) == (2, ["system", "chat"], 160, None)
    assert parse_args(["--quick"]).requests == 16
    args = parse_args(["--replicas", "4", "--workloads", "documents", "--documents", "9"])
    assert (args.replicas, args.workloads, args.documents, args.documents_sized) == (4, ["documents"], 9, False)
    assert set(WORKLOADS) >= {"system", "documents", "chat"}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--replicas", "1"], "--replicas: at least 2"),
        (["--workloads", "system,poems"], "--workloads: a comma-separated list"),
        (["--workloads", "chat,chat"], "--workloads: a comma-separated list"),
        (["--workloads", ","], "--workloads: a comma-separated list"),
        (["--kv-blocks", str(MAX_NUM_SEQS)], "--kv-blocks: more than --max-num-seqs"),
        (["--documents", "0"], "--documents: at least 1"),
        (["--document-words", "0"], "at least 1"),
        (["--requests", "4"], "--requests: at least one per client"),
    ],
)
def test_arguments_that_cannot_make_a_run_are_refused(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_replicas_that_do_not_fit_in_memory_are_refused() -> None:
    assert memory_refusal(4, 1600, 24 * 1024) is None
    refusal = memory_refusal(16, 1600, 22 * 1024)
    assert refusal is not None
    assert refusal.startswith("16 vLLM replica(s) to start need about 26.0 GiB (1.56 GiB each")
    assert "and 22.0 GiB is available: ask for fewer --replicas" in refusal


def test_engines_take_the_cores_in_turn() -> None:
    assert engine_cores(2, [0, 1]) == [0, 1]
    assert engine_cores(5, [2, 3]) == [2, 3, 2, 3, 2]
    assert engine_cores(3, []) == [None, None, None]


@given(st.integers(2, 8), st.integers(2, 200), st.data())
def test_the_documents_are_more_than_one_cache_holds_and_fit_in_all(replicas: int, cap: int, data: Any) -> None:
    blocks = data.draw(st.integers(1, cap))
    working = documents_for(replicas, cap, blocks) * blocks
    assert cap < working <= replicas * cap


def test_the_note_says_how_many_replicas_and_which_documents() -> None:
    args = parse_args(["--replicas", "4", "--workloads", "documents,chat"])
    args.documents = 14
    text = note(args, {"block_size": 128, "replica_mib": 1536})
    assert text.startswith("4 vLLM replicas (`") and "32 KV blocks of 128 tokens; 1.5 GiB each" in text
    assert "documents: 14 shared documents of 145 words (as many as fill 3/4 of the replicas' caches)" in text
    assert "chat: 40 conversations of 4 turns" in text and "system:" not in text


def test_out_and_name_place_the_results_side_by_side() -> None:
    args = parse_args(["--systems", "28", "--out", "/tmp/x", "--name", "routing-pressure"])
    assert (args.systems, args.out, args.name) == (28, Path("/tmp/x"), "routing-pressure")
    assert parse_args([]).name == "routing"

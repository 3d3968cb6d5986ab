"""The routing benchmark's offline oracle and its per-phase figures (sans-IO parts of
``benchmarks/routing.py``)."""

from __future__ import annotations

from benchmarks.routing import Phase, oracle_rate, phase_figures


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

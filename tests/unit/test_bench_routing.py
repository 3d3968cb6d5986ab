"""The routing benchmark's offline oracles and its per-phase figures (sans-IO parts of
``benchmarks/routing.py`` and ``benchmarks/routing_oracle.py``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.routing import Phase, phase_figures
from benchmarks.routing_oracle import bounded_rate
from benchmarks.routing_oracle import unbounded_rate as oracle_rate


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

"""The benchmark reads its latency targets from the interleaved rounds: per round, the subject's figure
less direct's from the same round, then the median; single runs only where there are no rounds."""

from __future__ import annotations

from typing import Any

from benchmarks.report import per_dialect


def result(subject: str, single_c1: float, single_ttft: float, **rounds: list[float]) -> dict[str, Any]:
    return {
        "subject": subject,
        "runs": {"c1": {"latency_ms": {"p50": single_c1}}},
        "ttft": {"first_token_ms": {"p50": single_ttft}},
        "rounds": rounds or None,
    }


def test_added_latency_is_the_median_of_each_rounds_difference_from_direct() -> None:
    # a slow spell in round 2 slows both; the paired differences do not see it
    direct = result("direct", 0.05, 0.3, c1_p50_ms=[0.05, 0.40, 0.06], ttft_p50_ms=[0.30, 0.90, 0.31])
    gateway = result("gateway", 9.0, 9.0, c1_p50_ms=[0.50, 0.90, 0.52], ttft_p50_ms=[0.70, 1.40, 0.75])
    figures = per_dialect(gateway, direct, None)
    assert abs((figures["added_p50_c1"] or 0) - 0.46) < 1e-9  # differences 0.45, 0.50, 0.46
    assert abs((figures["added_ttft"] or 0) - 0.44) < 1e-9  # differences 0.40, 0.50, 0.44


def test_without_rounds_the_single_runs_are_read() -> None:
    direct = result("direct", 0.05, 0.3)
    gateway = result("gateway", 0.5, 0.8)
    figures = per_dialect(gateway, direct, None)
    assert abs((figures["added_p50_c1"] or 0) - 0.45) < 1e-9
    assert abs((figures["added_ttft"] or 0) - 0.5) < 1e-9


def test_rounds_that_do_not_pair_up_fall_back_to_the_single_runs() -> None:
    direct = result("direct", 0.05, 0.3, c1_p50_ms=[0.05, 0.06], ttft_p50_ms=[0.3, 0.3])
    gateway = result("gateway", 0.5, 0.8, c1_p50_ms=[0.5], ttft_p50_ms=[0.7])
    figures = per_dialect(gateway, direct, None)
    assert abs((figures["added_p50_c1"] or 0) - 0.45) < 1e-9


def test_the_tail_ratio_is_read_from_the_rounds_else_from_the_c64_runs() -> None:
    yard: dict[str, Any] = {"runs": {"c64": {"latency_ms": {"p99": 10.0}}}, "rounds": {"c64_p99_ms": [2, 9, 2.2]}}
    gateway: dict[str, Any] = {"runs": {"c64": {"latency_ms": {"p99": 5.0}}}, "rounds": {"c64_p99_ms": [3, 3.2, 30]}}
    assert abs((per_dialect(gateway, None, yard)["p99_ratio"] or 0) - 3.2 / 2.2) < 1e-9  # medians of rounds
    del gateway["rounds"], yard["rounds"]  # results from before the rounds had it
    assert abs((per_dialect(gateway, None, yard)["p99_ratio"] or 0) - 0.5) < 1e-9

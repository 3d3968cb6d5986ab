"""Tallies: what a scrape shows after ``flush`` is what prometheus-client's own updates would show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.obs import metrics
from gateway.obs.metrics import CountTally, LevelTally, histogram

BUCKETS = (0.001, 0.01, 0.1, 1.0)
VALUES = [0.0, 0.0005, 0.001, 0.0011, 0.01, 0.05, 0.1, 1.0, 1.5, 99.0, 0.01]


def pair(kind: Any, **kw: Any) -> tuple[CollectorRegistry, Any, CollectorRegistry, Any]:
    direct, tallied = CollectorRegistry(), CollectorRegistry()
    a = kind("m", "doc", ["l"], registry=direct, **kw).labels("x")
    b = kind("m", "doc", ["l"], registry=tallied, **kw).labels("x")
    return direct, a, tallied, b


def exposition(registry: CollectorRegistry) -> list[str]:
    # _created lines carry the creation time, which differs between the two registries
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_a_histogram_tally_fills_the_same_buckets_and_sum_as_observe() -> None:
    """Bit for bit, the sum included (carried on from the child's own in the same order), NaN and
    infinity too; nothing shows before the flush, and a second flush adds nothing."""
    direct, child, tallied, other = pair(Histogram, buckets=BUCKETS)
    tally = histogram(other)
    assert histogram(other) is tally  # one tally a child: its sum carries on the child's
    rounds = [VALUES, [0.1 * k for k in range(1, 200)], [float("inf"), 1e-300, 0.3], [float("nan")]]
    for values in rounds:
        before = exposition(tallied)
        for v in values:
            child.observe(v)
            tally.observe(v)
        assert exposition(tallied) == before  # held until the flush (before each scrape)
        metrics.flush()
        assert exposition(tallied) == exposition(direct)
        assert repr(other._sum.get()) == repr(child._sum.get())  # exact, bit for bit
    metrics.flush()
    assert exposition(tallied) == exposition(direct)


def test_a_count_tally_adds_its_increments_once() -> None:
    direct, child, tallied, other = pair(Counter)
    owner = metrics.Tallies()
    tally = CountTally(other, owner)
    for n in (1, 5, 2):
        child.inc(n)
        tally.n += n
    metrics.flush(owner)
    metrics.flush(owner)
    assert exposition(tallied) == exposition(direct)


@pytest.mark.parametrize("moves", [[1, 1, -1], [1, -1], [3, -1, -1, -1]])
def test_a_level_tally_sets_the_gauge_to_its_level(moves: list[int]) -> None:
    direct, child, tallied, other = pair(Gauge)
    owner = metrics.Tallies()
    tally = LevelTally(other, owner)
    for n in moves:
        child.inc(n)
        tally.n += n
    metrics.flush(owner)
    assert exposition(tallied) == exposition(direct)


def test_an_apps_tallies_are_its_own() -> None:
    """Two apps in one process (tests) keep their tallies apart: one's flush leaves the other's
    figures alone, and neither lands in the process-wide list."""
    *_, other = pair(Counter)
    first, second = metrics.Tallies(), metrics.Tallies()
    tally = CountTally(other, first)
    tally.n += 3
    metrics.flush(second)
    assert tally.n == 3 and tally not in metrics.PROCESS.items
    metrics.flush(first)
    assert tally.n == 0


def test_a_scrape_while_a_worker_creates_its_file_reads_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's file exists empty for a moment before it is sized; reading it failed the whole
    scrape (/metrics answered 500 while ``--workers`` started, once in about 30 runs under load)."""
    (tmp_path / "counter_4242.db").write_bytes(b"")  # a worker between creating and sizing its file
    (tmp_path / "gauge_livesum_4243.db").write_bytes(b"")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert metrics.exposition()[0] == b""  # nothing recorded yet, and no error

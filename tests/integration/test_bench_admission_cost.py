"""benchmarks.admission_cost's subject (run here without callgrind): the bench's limits, admitted and
settled in the test Redis."""

from __future__ import annotations

from benchmarks import admission_cost


async def test_the_subject_admits_every_request() -> None:
    assert await admission_cost.inner("redis://127.0.0.1:6379/13", 32) == 32

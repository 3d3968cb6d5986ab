"""benchmarks.record_cost's subject (run here without callgrind): its records make the request lines a
chat request makes, and it leaves the process's log sink and access logger as it found them."""

from __future__ import annotations

import json
import logging

from benchmarks import record_cost
from gateway.obs import logs


def test_the_subjects_records_make_whole_request_lines_and_leave_the_sink_alone() -> None:
    before, level = logs._sink, logging.getLogger(logs.ACCESS_LOGGER).level
    lines = record_cost.inner(3, "line")
    assert logs._sink is before and logging.getLogger(logs.ACCESS_LOGGER).level == level
    assert [json.loads(line)["request_id"] for line in lines] == ["req-00000000", "req-00000001", "req-00000002"]
    line = json.loads(lines[0])
    assert (line["event"], line["status"], line["completion_tokens"], line["duration_ms"]) == ("request", 200, 64, 2.1)
    assert record_cost.inner(3, "emit") == [] and logs._sink is before

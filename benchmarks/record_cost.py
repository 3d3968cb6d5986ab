"""Instructions per request record (``gateway.web.record``), counted by callgrind: its ``emit`` on the
loop (metrics and the log line's fields) and the writer thread's formatting of that line, apart from
the rest of a request, whose count in ``benchmarks.instructions`` moves by ~0.5% run to run.

Three runs of this module under callgrind on ``--records`` typical chat records (one try, whole
answer, usage reported): records made only, then emitted, then their lines formatted too; the
differences, per record, are the two parts. No server, no sockets: about two minutes in all.

    python -m benchmarks.record_cost [--records 2000]
"""

from __future__ import annotations

import argparse
import io
import logging
import shutil
import subprocess
import sys
import time

from gateway.obs import logs
from gateway.policy.auth import Principal
from gateway.web.record import Backlog, RequestLog

PARTS = ("none", "emit", "line")


def _record(backlog: Backlog, i: int) -> RequestLog:
    log = RequestLog(backlog, logging.getLogger(logs.ACCESS_LOGGER), f"req-{i:08d}", "openai-chat")
    log.principal, log.model, log.model_label = Principal("key-1", "team-a"), "tiny", "tiny"
    log.attempt.target, log.attempt.provider, log.attempt.tries = "fake", "openai", 1
    log.attempt.upstream_seconds, log.ttfb = 0.0007, 0.00123
    log.prompt_tokens, log.completion_tokens = 12, 64
    log.ended, log.wall = log.started + 0.0021, time.time()
    return log


def inner(records: int, part: str) -> list[str]:
    """The subject: ``records`` records made, then (``part``) emitted, then their lines formatted
    (returned)."""
    sink, before = logs.LogSink(), logs._sink
    access = logging.getLogger(logs.ACCESS_LOGGER)
    level = access.level
    logs._sink = sink  # the writer's sink, without its thread: lines formatted here, in turn
    access.setLevel(logging.INFO)
    try:
        return _run(sink, logs.LogWriter(sink, io.StringIO(), "json"), records, part)
    finally:  # as found: a test runs it in a process that goes on
        logs._sink = before
        access.setLevel(level)


def _run(sink: logs.LogSink, writer: logs.LogWriter, records: int, part: str) -> list[str]:
    backlog = Backlog()
    for i in range(50):  # the series, caches and the clock's second warmed
        _record(backlog, -i).emit()
        writer._line(sink.lines.pop())
    made = [_record(backlog, i) for i in range(records)]
    if part == "none":
        return []
    for log in made:
        log.emit()
    lines = []
    if part == "line":
        while sink.lines:
            lines.append(writer._line(sink.lines.popleft()))
    return lines


def _count(records: int, part: str) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    cmd += [sys.executable, "-m", "benchmarks.record_cost", "--inner", part, "--records", str(records)]
    err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    return int(err.rsplit("Collected : ", 1)[1].split()[0])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--inner", choices=PARTS, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.inner:
        inner(a.records, a.inner)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed (Debian's valgrind package)")
    none, emit, line = (_count(a.records, part) for part in PARTS)
    per = {"emit": (emit - none) / a.records, "line": (line - emit) / a.records, "total": (line - none) / a.records}
    print(" ".join(f"{k} {v / 1000:.1f}k" for k, v in per.items()), "instructions per record")


if __name__ == "__main__":
    main()

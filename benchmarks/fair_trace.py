"""Where a team's TTFT goes, request by request, from a ``scripts/bench-fair --records FILE`` run:

    python -m benchmarks.fair_trace FILE [--scenario a] [--team quiet] [--worst 8]

Each record joins the client's times with the scripted pool's (``benchmarks/fair_pool.py`` logs, per
request, when it arrived, took a slot, sent its first token and ended). A request's TTFT splits into

* ``gateway``: due to its arrival at the pool: the client's send, the gateway's own work, and the wait
  for a slot in the gateway's queue;
* ``pool queue``: arrival to a slot in the pool (0 when the gateway holds what the pool cannot take);
* ``prefill``: the pool's time to the first token;
* ``relay``: the pool's first token to the client's.

Beside them: ``next free``, from the request's due time to the first end of any request at the pool
after it (when a slot next came free; a work-conserving queue cannot grant sooner), ``after free``
(``gateway`` less ``next free``: the hand-over, and any slot that went to another first), and
``passed``: requests of other teams that reached the pool while this one waited in the gateway.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.procs import percentile

PARTS = ("ttft", "gateway", "next free", "after free", "pool queue", "prefill", "relay", "passed")


def parts(record: dict[str, Any], ends: list[float], arrivals: list[tuple[float, str]]) -> dict[str, float]:
    """One served request's TTFT in its parts (seconds; ``passed`` a count)."""
    due, ttft = record["due"], record["ttft"]
    arrived, started, first, _ = record["pool"]
    free = ends[bisect.bisect_left(ends, due)] - due if bisect.bisect_left(ends, due) < len(ends) else 0.0
    lo, hi = bisect.bisect_right(arrivals, (due, "~")), bisect.bisect_left(arrivals, (arrived, ""))
    passed = sum(1 for _, team in arrivals[lo:hi] if team != record["team"])
    gateway = arrived - due
    return {
        "ttft": ttft,
        "gateway": gateway,
        "next free": free,
        "after free": gateway - free,
        "pool queue": started - arrived,
        "prefill": first - started,
        "relay": due + ttft - first,
        "passed": float(passed),
    }


def breakdown(records: list[dict[str, Any]], team: str, warmup: float) -> list[dict[str, float]]:
    """The parts of each of ``team``'s served requests due after ``warmup``, slowest first."""
    logged = [r for r in records if r.get("pool")]
    ends = sorted(r["pool"][3] for r in logged)
    arrivals = sorted((r["pool"][0], r["team"]) for r in logged)
    rows = [
        parts(r, ends, arrivals) for r in logged if r["team"] == team and r["due"] >= warmup and r["ttft"] is not None
    ]
    return sorted(rows, key=lambda p: -p["ttft"])


def fmt(name: str, v: float) -> str:
    return f"{v:.0f}" if name == "passed" else f"{v * 1000:.0f}"


def render(rows: list[dict[str, float]], worst: int) -> str:
    head = "| | " + " | ".join(PARTS) + " |"
    lines = [head, "|---|" + "---:|" * len(PARTS)]
    for q in (50, 90, 99):
        cells = [fmt(p, percentile(sorted(r[p] for r in rows), q)) for p in PARTS]
        lines.append(f"| p{q} (each part alone) | " + " | ".join(cells) + " |")
    for i, r in enumerate(rows[:worst]):
        lines.append(f"| slowest {i + 1} | " + " | ".join(fmt(p, r[p]) for p in PARTS) + " |")
    return "\n".join(lines) + "\n\nTimes in ms; `passed`: other teams' requests that reached the pool meanwhile."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", type=Path)
    p.add_argument("--scenario", default="a")
    p.add_argument("--team", default="quiet")
    p.add_argument("--mode", default="with")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--worst", type=int, default=8)
    args = p.parse_args(argv)
    records = [json.loads(line) for line in args.records.read_text().splitlines() if line.strip()]
    chosen = [r for r in records if r["scenario"] == args.scenario and r["mode"] == args.mode]
    rows = breakdown(chosen, args.team, args.warmup)
    if not rows:
        print(f"no served {args.team} requests with the pool's times in {args.mode}/{args.scenario}", file=sys.stderr)
        return 1
    print(f"{args.mode} / {args.scenario} / {args.team}: {len(rows)} served requests\n")
    print(render(rows, args.worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())

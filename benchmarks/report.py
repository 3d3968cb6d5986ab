"""Targets and the markdown report of a benchmark run (``run.py`` writes both; this re-renders).

    python -m benchmarks.report [benchmarks/results/latest.json]   # prints the markdown again

Every target compares figures measured in the same run: the gateway against ``direct`` (added latency)
or against the bare aiohttp ``yardstick`` (ratios).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Result = dict[str, Any]


@dataclass(frozen=True)
class Target:
    key: str
    text: str
    goal: float
    unit: str  # "x" (ratio), "ms", "MiB", "%"
    at_least: bool = False
    process_wide: bool = False  # one value per gateway process, not per dialect

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value >= self.goal if self.at_least else value <= self.goal


TARGETS = (
    Target("cpu_ratio", "CPU per non-streaming request (c64) ≤ 1.5x the yardstick's", 1.5, "x"),
    Target("added_p50_c1", "added p50 latency at c1 (vs direct) ≤ 0.5 ms", 0.5, "ms"),
    Target("p99_ratio", "p99 latency at c64 ≤ 2x the yardstick's", 2.0, "x"),
    Target("stream_ratio", "64-chunk streams/s ≥ 70% of the yardstick's", 0.7, "x", at_least=True),
    Target("added_ttft", "added TTFT p50 (vs direct) ≤ 0.5 ms", 0.5, "ms"),
    Target("rss_peak", "peak RSS (VmHWM) ≤ 100 MiB per worker", 100.0, "MiB", process_wide=True),
    Target("rss_growth", "RSS growth over the soak ≤ 5%", 5.0, "%", process_wide=True),
)
BY_KEY = {t.key: t for t in TARGETS}


def get(node: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return node


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def diff(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def median_of_rounds(node: Result | None, key: str) -> float | None:
    values = [v for v in get(node, "rounds", key) or () if v is not None]
    return statistics.median(values) if values else None


def added_in_rounds(subject: Result | None, direct: Result | None, key: str) -> float | None:
    """The median over rounds of the subject's figure less direct's in the same round."""
    ours, base = get(subject, "rounds", key), get(direct, "rounds", key)
    if not ours or not base or len(ours) != len(base):
        return None
    added = [a - b for a, b in zip(ours, base, strict=True) if a is not None and b is not None]
    return statistics.median(added) if added else None


def per_dialect(subject: Result, direct: Result | None, yard: Result | None) -> dict[str, float | None]:
    # The targets come from the interleaved rounds when there are some (see ``interleaved`` in
    # run.py), else from the subjects' single runs.
    cpu = ratio(median_of_rounds(subject, "cpu_us"), median_of_rounds(yard, "cpu_us"))
    streams = ratio(median_of_rounds(subject, "stream_rps"), median_of_rounds(yard, "stream_rps"))
    p99 = ratio(median_of_rounds(subject, "c64_p99_ms"), median_of_rounds(yard, "c64_p99_ms"))
    c1 = added_in_rounds(subject, direct, "c1_p50_ms")
    ttft = added_in_rounds(subject, direct, "ttft_p50_ms")
    return {
        "cpu_ratio": cpu
        if cpu is not None
        else ratio(
            get(subject, "runs", "c64", "server_cpu_us_per_req"), get(yard, "runs", "c64", "server_cpu_us_per_req")
        ),
        "added_p50_c1": c1
        if c1 is not None
        else diff(get(subject, "runs", "c1", "latency_ms", "p50"), get(direct, "runs", "c1", "latency_ms", "p50")),
        "p99_ratio": p99
        if p99 is not None
        else ratio(get(subject, "runs", "c64", "latency_ms", "p99"), get(yard, "runs", "c64", "latency_ms", "p99")),
        "stream_ratio": streams
        if streams is not None
        else ratio(get(subject, "runs", "stream", "rps"), get(yard, "runs", "stream", "rps")),
        "added_ttft": ttft
        if ttft is not None
        else diff(get(subject, "ttft", "first_token_ms", "p50"), get(direct, "ttft", "first_token_ms", "p50")),
    }


def process_wide(subject_results: list[Result], soak: Result | None) -> dict[str, float | None]:
    peaks = [get(r, "memory", "vmhwm_mib") for r in subject_results] + [get(soak, "vmhwm_after_mib")]
    known = [p for p in peaks if p is not None]
    return {"rss_peak": max(known) if known else None, "rss_growth": get(soak, "growth_pct")}


def evaluate(results: list[Result], soak: Result) -> list[Result]:
    """One row per target: the value per gateway column (subject/dialect), the yardstick's own value for
    reference, and whether every measured column meets the goal (None: something was not measured)."""
    direct = next((r for r in results if r["subject"] == "direct"), None)
    yard = next((r for r in results if r["subject"] == "yardstick"), None)
    gateways = [r for r in results if r["subject"].startswith("gateway")]
    subjects = list(dict.fromkeys(g["subject"] for g in gateways))
    wide = {
        s: process_wide([g for g in gateways if g["subject"] == s], soak if s == "gateway" else None) for s in subjects
    }
    rows = []
    for t in TARGETS:
        values: dict[str, float | None] = {}
        shared: list[str] = []
        for g in gateways:
            column = f"{g['subject']}/{g['dialect']}"
            if t.key in STREAM_TARGETS and "runs" in g and "stream" not in g["runs"]:
                continue  # a dialect without streams (embeddings): not a column of a stream target
            if not t.process_wide:
                values[column] = per_dialect(g, direct, yard)[t.key]
            elif g is next(x for x in gateways if x["subject"] == g["subject"]):
                values[column] = wide[g["subject"]][t.key]
            else:
                shared.append(column)
        if t.key == "rss_growth":
            values = {k: v for k, v in values.items() if k.startswith("gateway/")}  # only the plain gateway soaks
        verdicts = [t.met(v) for v in values.values()]
        reference: float | None = None
        if yard is not None:
            if t.key == "rss_peak":
                reference = get(yard, "memory", "vmhwm_mib")
            elif not t.process_wide:
                reference = per_dialect(yard, direct, yard)[t.key]
        rows.append(
            {
                "key": t.key,
                "target": t.text,
                "goal": t.goal,
                "unit": t.unit,
                "values": values,
                "same_process": shared,
                "yardstick": reference,
                "met": None if not verdicts or None in verdicts else all(verdicts),
            }
        )
    return rows


STREAM_TARGETS = frozenset({"stream_ratio", "added_ttft"})


def fmt(value: float | None, t: Target) -> str:
    if value is None:
        return "n/a"
    if t.unit == "x":
        return f"{value * 100:.0f}%" if t.at_least else f"{value:.2f}x"
    if t.unit == "ms":
        return f"{value:.3f} ms"
    if t.unit == "MiB":
        return f"{value:.1f} MiB"
    return f"{value:.2f}%"


def cell(v: Any, digits: int = 0, suffix: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}{suffix}"
    return f"{v}{suffix}"


def percent(v: float | None) -> str:
    return cell(v * 100 if v is not None else None, 0, "%")


def notes(meta: Result, results: list[Result], soak: Result, settings: Result) -> list[str]:
    out = []
    out.append(
        "Closed loop (the c1/c8/c64 tables): wrk keeps N connections busy, each sending its next request when the "
        "previous answer ends. Throughput is the subject's capacity on its core; latency at c8 and c64 is mostly "
        "queueing (Little's law), and a stall also delays the requests that would have been sent meanwhile "
        "(coordinated omission)."
        + (
            " Open loop (the 'Fixed rate' table): requests arrive at a fixed rate whatever the answers do, and "
            "each latency counts from the request's issue, waits for a free connection included."
            if meta.get("open_loop_rate")
            else ""
        )
    )
    out += [
        "2 cores: the subject has core 0; wrk, the fake upstream and this runner (the TTFT client) share core 1. "
        "'direct' puts all of its work on that one core, so it is a latency floor, not a throughput ceiling.",
        "CPU µs per request: the subject's utime+stime (process tree, /proc, 10 ms ticks) over a run, divided "
        "by the requests wrk completed in it; the requests still in flight when wrk stops add a little noise.",
        "The CPU, p99, streams/s, c1 latency and TTFT targets are read from the interleaved rounds (every subject in "
        "turn, several short rounds in alternating order; direct too, the floor 'added' latency is measured from), "
        "not from the single runs in the tables: this VM's speed drifts by "
        "tens of percent over minutes (a neighbour on the host), and one long run per subject lets a slow spell "
        "land on one subject only. The single runs of one subject can differ from its rounds for that reason. "
        "Every subject is up during the rounds, which come first: a gateway's memory after its first dialect "
        "already includes every dialect's rounds.",
        "The fake upstream answers from a cache in a few µs. A real model server's time hides most of the "
        "relative overhead: these numbers are the gateway's own cost, not what a user would notice.",
        "TTFT is measured at concurrency 1 with an aiohttp client on core 1 (its own cost is in every subject "
        "and cancels out of 'added'). "
        + (
            "The fake upstream sent each stream in one write (no delay between chunks), so TTFT includes the "
            "subject's work on the whole burst it received; pass --upstream-gap-ms to space the chunks out."
            if not settings.get("upstream_gap_ms")
            else f"The fake upstream spaced chunks by {settings['upstream_gap_ms']} ms."
        ),
    ]
    subject_foreign = meta.get("max_foreign_subject_core_pct", 0.0)
    load_foreign = meta.get("max_foreign_load_core_pct", 0.0)
    if meta.get("background_pct", 0.0) > 10 or max(subject_foreign, load_foreign) > 10:
        out.append(
            f"**Shared machine.** {meta.get('background_pct', 0):.0f}% of the CPU was busy with other work just "
            f"before the run; during the load runs other work took up to {subject_foreign:.0f}% of the subject's "
            f"core and {load_foreign:.0f}% of the load core (per run: `foreign_pct_*` in latest.json). Absolute "
            "numbers are pessimistic and noisy, tail latencies most of all; ratios within one run are the figures "
            "to read, and even they move between runs under such load. Re-run on an idle machine for figures to "
            "quote."
        )
    bad = [f"{r['subject']}/{r['dialect']}" for r in results if any(x["errors"] for x in r.get("runs", {}).values())]
    if bad:
        out.append(f"**Errors** (non-2xx answers or socket errors) in {', '.join(bad)}: those figures are not valid.")
    skipped = [f"{r['subject']}/{r['dialect']}" for r in results if "runs" not in r]
    if skipped:
        out.append(f"Not measured (failed the preflight request): {', '.join(skipped)}.")
    if soak and not soak.get("complete"):
        out.append("The soak was stopped by its time cap before its request count: RSS growth covers fewer requests.")
    for subject, logs in meta.get("server_logs", {}).items():
        if logs.get("error_lines"):
            out.append(
                f"{subject} logged {logs['error_lines']} lines at level error during the run (keep its log with "
                "--keep-logs to read them); wrk closing connections with requests in flight at the end of each run "
                "can cause some."
            )
    if any(r["subject"] == "gateway+redis" for r in results):
        out.append(
            "gateway+redis: a private redis-server on the load core holds the team limits (set far above the "
            "load). Its CPU is not in the gateway's µs/request (shown beside it as '+N redis'), nor in the "
            "CPU-ratio target."
        )
    if settings.get("nice"):
        out.append(f"Every benchmark process ran at niceness {settings['nice']}.")
    return out


def render(report: Result) -> str:
    meta, results, soak, settings = report["meta"], report["results"], report["soak"], report["settings"]
    concurrencies = settings["concurrencies"]
    direct = next((r for r in results if r["subject"] == "direct"), None)
    yard = next((r for r in results if r["subject"] == "yardstick"), None)
    lines = [
        f"# Gateway overhead benchmark, {meta['date']}",
        "",
        f"`{meta['command']}` ({meta['duration_s']} s) · {meta['nproc']} cores ({meta['cpu_model']}), "
        f"{meta['memory_gib']} GiB, {meta['kernel']} · Python {meta['python']}, aiohttp {meta['aiohttp']}, "
        f"uvloop {meta['uvloop']}, {meta['wrk']} · cpuidle {meta.get('cpuidle', '?')} · code at {meta['git']}",
        "",
        f"**Load model:** {meta['load_model']}",
        "",
        f"**Pinning:** {meta['pinning']}",
        "",
        "## Targets",
        "",
    ]
    targets = report["targets"]
    columns = list(dict.fromkeys(c for t in targets for c in [*t["values"], *t["same_process"]]))
    if not columns:
        lines.append("No gateway was measured.")
    else:
        lines.append("| target | yardstick | " + " | ".join(columns) + " | met |")
        lines.append("|---" * (len(columns) + 3) + "|")
        for row in targets:
            t = BY_KEY[row["key"]]
            cells = []
            for c in columns:
                if c in row["values"]:
                    v = row["values"][c]
                    verdict = t.met(v)
                    cells.append(("" if verdict is None else ("✅ " if verdict else "❌ ")) + fmt(v, t))
                elif c in row["same_process"]:
                    cells.append("(same process)")
                else:
                    cells.append("-")
            met = {True: "**yes**", False: "**no**", None: "n/a"}[row["met"]]
            ref = fmt(row["yardstick"], t) if row["yardstick"] is not None else "-"
            lines.append(f"| {row['target']} | {ref} | " + " | ".join(cells) + f" | {met} |")
        lines += [
            "",
            "'added' is against direct, ratios against the yardstick, all from this run. Peak RSS is the gateway "
            "process's VmHWM at its end (after the soak); RSS growth is over the soak (openai dialect).",
        ]
    lines += [
        "",
        "## Non-streaming: throughput, latency, CPU",
        "",
        "| subject | dialect | conns | req/s | p50 ms | p90 ms | p99 ms | added p50 ms | added p99 ms "
        "| CPU µs/req | subject core busy | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "runs" not in r:
            error = get(r, "preflight", "error")
            lines.append(f"| {r['subject']} | {r['dialect']} | not measured: {error} |||||||||")
            continue
        for c in concurrencies:
            run = r["runs"][f"c{c}"]
            lat = run["latency_ms"]
            base = None if r is direct else get(direct, "runs", f"c{c}", "latency_ms")
            busy = None
            if meta.get("subject_core") is not None and r["subject"] != "direct":
                busy = run["core_busy_pct"].get(str(meta["subject_core"]))
            cpu = run.get("server_cpu_us_per_req")
            # direct has no subject process: what the fake upstream spent, in brackets
            cpu_cell = cell(cpu, 1) if cpu is not None else f"({cell(run.get('upstream_cpu_us_per_req'), 1)} upstream)"
            if run.get("extra_cpu_us_per_req") is not None:
                cpu_cell += f" (+{run['extra_cpu_us_per_req']:.1f} redis)"
            lines.append(
                f"| {r['subject']} | {r['dialect']} | {c} | {run['rps']:.0f} | {lat['p50']:.3f} | {lat['p90']:.3f} "
                f"| {lat['p99']:.3f} | {cell(diff(lat['p50'], get(base, 'p50')), 3)} "
                f"| {cell(diff(lat['p99'], get(base, 'p99')), 3)} | {cpu_cell} | {cell(busy, 0, '%')} "
                f"| {run['errors']} |"
            )
    chunks, conns = settings["chunks"], settings["stream_connections"]
    lines += [
        "",
        f"## Streaming ({chunks} chunks per stream)",
        "",
        f"| subject | dialect | streams/s (c{conns}) | CPU µs/stream | head p50 ms | TTFT p50 ms | TTFT p90 ms "
        "| added TTFT p50 ms | stream end p50 ms | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    base_ttft = get(direct, "ttft", "first_token_ms", "p50")
    for r in results:
        if "stream" not in r.get("runs", {}):  # not measured, or no streams (embeddings)
            continue
        s, tt = r["runs"]["stream"], r["ttft"]
        added = None if r is direct else diff(tt["first_token_ms"]["p50"], base_ttft)
        lines.append(
            f"| {r['subject']} | {r['dialect']} | {s['rps']:.0f} | {cell(s.get('server_cpu_us_per_req'), 1)} "
            f"| {tt['head_ms']['p50']:.3f} | {tt['first_token_ms']['p50']:.3f} | {tt['first_token_ms']['p90']:.3f} "
            f"| {cell(added, 3)} | {tt['stream_end_ms']['p50']:.3f} | {s['errors']} |"
        )
    rounded = [r for r in results if get(r, "rounds", "cpu_us")]
    if rounded:
        profile = settings.get("profile") or {}
        lines += [
            "",
            f"## Interleaved rounds ({profile.get('rounds')} rounds of {profile.get('round_s')} s per column, "
            "alternating order): the CPU, tail and streams targets",
            "",
            "| subject | dialect | CPU µs/req (c64) per round | median | vs yardstick | streams/s (c64) per round "
            "| median | vs yardstick | errors |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        base_cpu, base_streams = median_of_rounds(yard, "cpu_us"), median_of_rounds(yard, "stream_rps")
        for r in rounded:
            cpu, streams = median_of_rounds(r, "cpu_us"), median_of_rounds(r, "stream_rps")
            per_cpu = " ".join(cell(v, 0) for v in r["rounds"]["cpu_us"])
            per_stream = " ".join(cell(v, 0) for v in r["rounds"]["stream_rps"])
            cpu_vs = ratio(cpu, base_cpu)
            stream_vs = ratio(streams, base_streams)
            lines.append(
                f"| {r['subject']} | {r['dialect']} | {per_cpu} | {cell(cpu, 1)} | {cell(cpu_vs, 2, 'x')} "
                f"| {per_stream} | {cell(streams, 0)} | {percent(stream_vs)} "
                f"| {sum(r['rounds'].get('errors') or ())} |"
            )
    tails = [r for r in rounded if get(r, "rounds", "c64_p99_ms")]
    if tails:
        base_p99 = median_of_rounds(yard, "c64_p99_ms")
        lines += [
            "",
            "p99 latency of the same runs at 64 connections (the tail target):",
            "",
            "| subject | dialect | p99 ms (c64) per round | median | vs yardstick |",
            "|---|---|---|---|---|",
        ]
        for r in tails:
            p99 = median_of_rounds(r, "c64_p99_ms")
            per_round = " ".join(cell(v, 2) for v in r["rounds"]["c64_p99_ms"])
            lines.append(
                f"| {r['subject']} | {r['dialect']} | {per_round} | {cell(p99, 2)} "
                f"| {cell(ratio(p99, base_p99), 2, 'x')} |"
            )
    timed = [r for r in results if get(r, "rounds", "c1_p50_ms")]
    if timed and direct is not None and direct in timed:
        lines += [
            "",
            "## Interleaved rounds: the latency targets (direct takes its turn too)",
            "",
            "p50 of one run per round at concurrency 1 (wrk, non-streaming) and TTFT p50 of "
            f"{settings.get('round_ttft_samples') or 'the'} sequential "
            "streams per round (aiohttp client); 'added' is the median over rounds of the subject's figure less "
            "direct's in the same round.",
            "",
            "| subject | dialect | c1 p50 ms per round | added | TTFT p50 ms per round | added |",
            "|---|---|---|---|---|---|",
        ]
        for r in timed:
            c1s = " ".join(cell(v, 3) for v in r["rounds"]["c1_p50_ms"])
            ttfts = " ".join(cell(v, 3) for v in r["rounds"]["ttft_p50_ms"])
            own = r is direct
            lines.append(
                f"| {r['subject']} | {r['dialect']} | {c1s} "
                f"| {'-' if own else cell(added_in_rounds(r, direct, 'c1_p50_ms'), 3)} | {ttfts} "
                f"| {'-' if own else cell(added_in_rounds(r, direct, 'ttft_p50_ms'), 3)} |"
            )
    paced = [r for r in results if get(r, "runs", "stream_paced")]
    if paced:
        gap, pconns = settings.get("paced_gap_ms"), settings.get("paced_connections")
        yard_cpu = get(yard, "runs", "stream_paced", "server_cpu_us_per_req")
        lines += [
            "",
            f"## Paced streams ({chunks} chunks {gap} ms apart, {pconns} connections)",
            "",
            "Each upstream read carries one chunk, as from a model writing tokens. CPU µs/chunk: the stream's CPU "
            "over its chunks (its fixed cost included).",
            "",
            "| subject | dialect | streams/s | CPU µs/stream | CPU µs/chunk | streams per core vs yardstick | errors |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in paced:
            run = r["runs"]["stream_paced"]
            cpu = run.get("server_cpu_us_per_req")
            per_core = None if r is direct or r is yard else ratio(yard_cpu, cpu)
            lines.append(
                f"| {r['subject']} | {r['dialect']} | {run['rps']:.0f} | {cell(cpu, 1)} "
                f"| {cell(cpu / chunks if cpu else None, 1)} | {percent(per_core)} "
                f"| {run['errors']} |"
            )
    fixed = [r for r in results if get(r, "runs", "fixed_rate")]
    if fixed:
        lines += [
            "",
            "## Fixed rate (open loop, benchmarks/openloop.py)",
            "",
            "| subject | dialect | rate/s | achieved req/s | p50 ms | p99 ms | added p50 ms | added p99 ms "
            "| CPU µs/req | errors |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        base = get(direct, "runs", "fixed_rate", "latency_ms")
        for r in fixed:
            run = r["runs"]["fixed_rate"]
            lat = run["latency_ms"]
            gaps = (None, None) if r is direct or not base else (lat["p50"] - base["p50"], lat["p99"] - base["p99"])
            lines.append(
                f"| {r['subject']} | {r['dialect']} | {run['fixed_rate']} | {run['rps']:.0f} "
                f"| {lat['p50']:.3f} | {lat['p99']:.3f} | {cell(gaps[0], 3)} | {cell(gaps[1], 3)} "
                f"| {cell(run.get('server_cpu_us_per_req'), 1)} | {run['errors']} |"
            )
    lines += ["", "## Memory", "", "| subject | after dialect | VmHWM MiB | VmRSS MiB |", "|---|---|---|---|"]
    for r in results:
        if "memory" in r:
            m = r["memory"]
            lines.append(f"| {r['subject']} | {r['dialect']} | {m['vmhwm_mib']:.1f} | {m['vmrss_mib']:.1f} |")
    if soak:
        lines += [
            "",
            f"Soak (gateway, openai, {soak['connections']} connections, after {soak.get('requests_before_soak', '?')} "
            f"measured requests): {soak['requests']} requests of {soak['target_requests']} wanted"
            + ("" if soak["complete"] else " (**stopped by its time cap**)")
            + f" in {soak['seconds']} s, {soak['errors']} errors; RSS {soak['rss_before_mib']} → "
            f"{soak['rss_after_mib']} MiB (max {soak['rss_max_mib']}), growth {soak['growth_pct']}%; VmHWM "
            f"{soak['vmhwm_after_mib']} MiB; the gateway wrote "
            f"{get(meta, 'server_logs', 'gateway', 'bytes_per_request') or '?'} bytes of log per request.",
        ]
    lines += ["", "## Caveats", ""]
    lines += [f"* {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else Path(__file__).resolve().parent / "results" / "latest.json"
    sys.stdout.write(render(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())

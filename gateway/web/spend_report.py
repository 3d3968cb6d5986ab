"""Spend reports: ``GET /admin/spend?group_by=team|key|model|target&period=day|week|month[&team=...]``
(admin auth, ``gateway.web.admin``) and the spend-against-budget rows of ``/status``.

Settled spend is read from the hourly usage hashes (``plan.usage_key``: ``spend`` and
``key:/model:/target:<name>:spend`` fields, millionths of the currency), summed over the hours of the
current day, week or month in the configured time zone (periods that begin off the hour, as in a
+05:30 zone, are counted from the hour they begin in). Budgets are read from their own hashes, which
also hold the worst case of requests still running."""

from __future__ import annotations

import time
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web

from gateway.limits.budget_rules import calendar, iso, money
from gateway.limits.plan import USAGE_BUCKET_SECONDS, tag, usage_key
from gateway.web.admin import problem, reply
from gateway.web.state import Gateway

GROUPS = ("team", "key", "model", "target")
PERIODS = ("day", "week", "month")


def hours(start: float, now: float) -> list[int]:
    first = int(start // USAGE_BUCKET_SECONDS)
    return [h * USAGE_BUCKET_SECONDS for h in range(first, int(now // USAGE_BUCKET_SECONDS) + 1)]


def grouped(team: str, fields: dict[str, int], group_by: str, into: dict[tuple[str, ...], int]) -> None:
    """Adds one usage hash's spend fields to ``into``, by the group they belong to."""
    for name, value in fields.items():
        if not name.endswith(":spend") and name != "spend":
            continue
        kind, _, rest = name.partition(":")
        if group_by == "team" and name == "spend":
            group: tuple[str, ...] = (team,)
        elif kind == group_by and group_by == "key":
            group = (team, rest.removesuffix(":spend"))
        elif kind == group_by:
            group = (rest.removesuffix(":spend"),)
        else:
            continue
        into[group] = into.get(group, 0) + value


async def spend_report(request: web.Request, gw: Gateway) -> web.Response:
    group_by = request.query.get("group_by", "team")
    period = request.query.get("period", "month")
    if group_by not in GROUPS:
        return problem(400, f"group_by must be one of {', '.join(GROUPS)}, not {group_by!r}")
    if period not in PERIODS:
        return problem(400, f"period must be one of {', '.join(PERIODS)}, not {period!r}")
    teams = [t.id for t in gw.config.teams]
    wanted = request.query.get("team")
    if wanted is not None:
        if wanted not in teams:
            return problem(404, "no such team")
        teams = [wanted]
    zone = ZoneInfo(gw.config.spend.time_zone)
    now = time.time()
    start, end = calendar(period, zone, now)
    starts = hours(start, now)
    counts = await gw.admission.limiter.usage([usage_key(t, s) for t in teams for s in starts])
    sums: dict[tuple[str, ...], int] = {}
    for i, fields in enumerate(counts):
        grouped(teams[i // len(starts)], fields, group_by, sums)
    names = ["team", "key"] if group_by == "key" else [group_by]
    rows = [
        {**dict(zip(names, group, strict=True)), "spend": money(micros), "spend_micros": micros}
        for group, micros in sorted(sums.items())
    ]
    total = sum(sums.values())
    return reply(
        {
            "group_by": group_by,
            "period": period,
            "start": iso(start, zone),
            "end": iso(end, zone),
            "currency": gw.config.spend.currency,
            "rows": rows,
            "total": money(total),
            "total_micros": total,
            "unpriced": [{"model": m, "target": t} for m, t in sorted(gw.gen.policies.prices.unpriced)],
        }
    )


async def budgets(gw: Gateway) -> list[dict[str, Any]]:
    """Each team budget's current window: spent (with running requests' worst case), of how much, and
    when it resets."""
    policies = [(team, policy.budget) for team, policy in gw.gen.policies.teams.items() if policy.budget]
    if not policies:
        return []
    hashes = await gw.admission.limiter.usage([f"{tag(team)}:budget" for team, _ in policies])
    now = time.time()
    out = []
    for (team, rules), fields in zip(policies, hashes, strict=True):
        for rule, limit in rules:
            window = rule.period.window(rule.unit, now)
            spent = sum(fields.get(f, 0) for f in window.fields)
            out.append(
                {
                    "team": team,
                    "budget": rule.amount(limit),
                    "period": rule.per,
                    "mode": "soft" if rule.soft else "hard",
                    "spent": rule.amount(spent),
                    "utilisation": round(spent / limit, 4),
                    "resets": iso(window.reset, rule.period.zone),
                }
            )
    return out

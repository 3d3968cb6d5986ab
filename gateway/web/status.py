"""``/status``: a server-rendered page for teams without Grafana — per-team usage (this hour), spend
against each team budget (and the models seen without a price), per-model traffic by outcome, each
model queue's slots, waiters and sheds, target health and Redis state — refreshing itself every 10 s. No JavaScript.

Protected by the admin key: ``Authorization: Bearer <admin key>``, or HTTP Basic with the admin key as
the password (so a browser can open it).
"""

from __future__ import annotations

import base64
import hmac
import html
import time

from aiohttp import web

from gateway.dialects.base import bearer_token
from gateway.limits.plan import usage_key
from gateway.obs import metrics
from gateway.policy.auth import hex_digest
from gateway.web import spend_report
from gateway.web.state import GATEWAY, Gateway

BUDGET_COLUMNS = ("team", "budget", "period", "mode", "spent", "utilisation", "resets")

STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}h1{font-size:20px}
h2{font-size:16px;margin-top:1.6em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}th{background:#f3f3f3}
.up{color:#08730c;font-weight:bold}.down{color:#b00020;font-weight:bold}"""


# The metrics' model label of requests refused before a model was resolved (bad key, path, body).
NO_MODEL = "(none: refused before a model was chosen)"


def cell(budget: dict[str, object], column: str) -> str:
    """A budget row's cell as a person reads it: utilisation as a percentage (the API keeps the ratio)."""
    value = budget[column]
    if column == "utilisation" and isinstance(value, (int, float)):
        return f"{value * 100:.1f}%"
    return str(value)


def presented_key(header: str | None) -> str | None:
    if header and header.lower().startswith("basic "):
        try:
            return base64.b64decode(header[6:]).decode().partition(":")[2] or None
        except ValueError:
            return None
    return bearer_token(header)


def traffic() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for family in metrics.registry().collect():
        if family.name != "gateway_requests":
            continue
        for s in family.samples:
            if s.name.endswith("_total"):
                row = out.setdefault(s.labels["model"], {})
                row[s.labels["outcome"]] = row.get(s.labels["outcome"], 0) + s.value
    return out


QUEUE_COLUMNS = [
    "model",
    "capacity here",
    "slots held here",
    "waiting here (class: n)",
    "shed (reason: n)",
    "mean hold",
]


def queue_rows(gw: Gateway) -> list[list[str]]:
    """Each model queue as this process sees it (``gateway.limits.fairq``): with Redis, the capacity is
    the pool's and the slots and waiters are this gateway's part of it."""
    rows = []
    for model, q in sorted(gw.fair.queues.items()):
        waiting: dict[str, int] = {}
        for (cls, _), tally in q.gauges.waiting.items():
            waiting[cls] = waiting.get(cls, 0) + int(tally.n)
        shed: dict[str, int] = {}
        for (_, _, reason), n in q.gauges.shed.items():
            shed[reason] = shed.get(reason, 0) + n
        rows.append(
            [
                html.escape(model),
                str(q.local.capacity if gw.redis is None else q.settings.capacity),
                str(int(q.gauges.slots.n)),
                html.escape(", ".join(f"{c}: {n}" for c, n in sorted(waiting.items()) if n) or "0"),
                html.escape(", ".join(f"{r}: {n}" for r, n in sorted(shed.items())) or "0"),
                f"{q.drain.mean:.2f} s",
            ]
        )
    return rows


def table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body or '<tr><td colspan=9>none yet</td></tr>'}</table>"


async def status(request: web.Request) -> web.Response:
    expected = request.app[GATEWAY].gen.admin_digest
    key = presented_key(request.headers.get("Authorization"))
    digest = hex_digest(key) if key else ""
    if not expected or not hmac.compare_digest(digest, expected):
        return web.Response(
            status=401, text="admin key required", headers={"WWW-Authenticate": 'Basic realm="llm-gateway-admin"'}
        )
    gw = request.app[GATEWAY]
    teams = [t.id for t in gw.config.teams]
    try:
        usage = await gw.admission.limiter.usage([usage_key(t) for t in teams])
    except Exception:  # the page still shows what it can while Redis is down
        usage = [{} for _ in teams]
    team_rows = [
        [html.escape(t), str(u.get("requests", 0)), str(u.get("prompt_tokens", 0)), str(u.get("completion_tokens", 0))]
        for t, u in zip(teams, usage, strict=True)
    ]
    outcomes = ["ok", "client_error", "rate_limited", "upstream_error", "timeout", "cancelled"]
    model_rows = [
        [html.escape(NO_MODEL if model == "-" else model), *(str(int(counts.get(o, 0))) for o in outcomes)]
        for model, counts in sorted(traffic().items())
    ]
    health = gw.gen.models.health
    health_rows = [
        [
            html.escape(name),
            '<span class="up">up</span>' if ok else '<span class="down">down</span>',
            html.escape(health[name].cause) if name in health and health[name].cause else "-",
            html.escape(health[name].hint) if name in health and health[name].hint else "-",
        ]
        for name, ok in sorted(gw.ready.items())
    ]
    redis = "not configured (in-process limits)" if gw.redis is None else "configured"
    try:
        budget_rows = [[html.escape(cell(b, k)) for k in BUDGET_COLUMNS] for b in await spend_report.budgets(gw)]
    except Exception:  # as usage: the page still shows what it can while Redis is down
        budget_rows = [["(unavailable while Redis is down)", *[""] * (len(BUDGET_COLUMNS) - 1)]]
    unpriced = ", ".join(html.escape(f"{m} on {t}") for m, t in sorted(gw.gen.policies.prices.unpriced))
    unpriced_note = f"<p>Not counted, no price: {unpriced}</p>" if unpriced else ""
    page = f"""<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">
<title>llm-gateway status</title><style>{STYLE}</style></head><body>
<h1>llm-gateway status</h1><p>{time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())} · Redis: {redis}</p>
<h2>Usage per team (this hour)</h2>{table(["team", "requests", "prompt tokens", "completion tokens"], team_rows)}
<h2>Spend against budget per team</h2>{table(list(BUDGET_COLUMNS), budget_rows)}{unpriced_note}
<h2>Traffic per model (since start)</h2>{table(["model", *outcomes], model_rows)}
<h2>Queues per model</h2>{table(QUEUE_COLUMNS, queue_rows(gw))}
<h2>Backend health</h2>{table(["target", "state", "last failure", "what to check (operators)"], health_rows)}
</body></html>"""
    return web.Response(text=page, content_type="text/html")

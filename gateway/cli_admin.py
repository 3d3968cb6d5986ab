"""``llm-gateway keys|teams|spend``: the admin API of a running gateway (``gateway/web/admin.py``),
as tables for a person or JSON (``--json``) for scripts. A client over HTTP only: nothing of the
gateway's own runs here, so it stands apart from ``cli.py``, which starts the app."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def admin_call(
    args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any] | int:
    """One admin API call (``gateway/web/admin.py``): its JSON answer, or an int exit code once the
    failure has been said in one line on stderr."""
    import httpx

    key = args.admin_key or os.environ.get("LLM_GATEWAY_ADMIN_KEY")
    if not key:
        print("error: give --admin-key or set LLM_GATEWAY_ADMIN_KEY", file=sys.stderr)
        return 2
    url = admin_url(args).rstrip("/")
    try:
        resp = httpx.request(method, url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    except httpx.HTTPError as exc:
        print(f"error: cannot reach {url}: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    try:
        answer = resp.json()
    except ValueError:
        answer = None
    error = answer.get("error") if isinstance(answer, dict) else None
    if resp.status_code == 401 and isinstance(error, dict) and error.get("type") == "admin_error":
        print(f"error: invalid admin key (refused by {url})", file=sys.stderr)
        return 1
    if not resp.is_success or not isinstance(answer, dict):
        said = error.get("message") if isinstance(error, dict) else None
        print(f"error: {said or f'{url}{path} answered HTTP {resp.status_code}, not the admin API'}", file=sys.stderr)
        return 1
    return answer


DEFAULT_URL = "http://127.0.0.1:8080"


def admin_url(args: argparse.Namespace) -> str:
    """The gateway to call: ``--url``, else ``LLM_GATEWAY_URL``, else ``server.host``/``server.port`` of
    ``--config``, else the default address ``serve`` listens on."""
    if args.url:
        return str(args.url)
    if os.environ.get("LLM_GATEWAY_URL"):
        return os.environ["LLM_GATEWAY_URL"]
    if getattr(args, "config", None):
        import yaml

        with open(args.config) as f:
            server = (yaml.safe_load(f) or {}).get("server") or {}
        host = str(server.get("host", "127.0.0.1"))
        host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # a wildcard bind, reached on loopback
        return f"http://{f'[{host}]' if ':' in host else host}:{server.get('port', 8080)}"
    return DEFAULT_URL


def iso(seconds: float | None, none: str = "-") -> str:
    """A time as the CLI shows it: ISO 8601, UTC, to the second."""
    if seconds is None:
        return none
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, two blanks apart, a header line on top."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [headers, *rows]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def pairs(values: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items()) or "-"


def show(args: argparse.Namespace, answer: dict[str, Any] | int, render: Callable[[dict[str, Any]], str]) -> int:
    """An admin answer as ``render`` lays it out for a person, or as JSON (``--json``) for scripts;
    an int is the call's exit code, its error already said."""
    if isinstance(answer, int):
        return answer
    import json

    print(json.dumps(answer, indent=2) if args.json else render(answer))
    return 0


def key_state(key: dict[str, Any]) -> str:
    if key.get("revoked"):
        return "revoked"
    expires = key.get("expires")
    return "expired" if expires is not None and expires <= time.time() else "active"


def render_keys(answer: dict[str, Any]) -> str:
    keys = answer.get("keys", [])
    if not keys:
        return "no issued keys"
    rows = [
        [
            k["id"],
            k.get("name") or "-",
            ",".join(k["teams"]),
            iso(k["created"]),
            iso(k["expires"], "never"),
            key_state(k),
        ]
        for k in sorted(keys, key=lambda k: k.get("created") or 0)
    ]
    return table(["ID", "NAME", "TEAMS", "CREATED", "EXPIRES", "STATE"], rows)


def render_new_key(answer: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"key: {answer['key']}",
            "(shown once: store it now; the gateway keeps only its digest)",
            f"id: {answer['id']}",
            f"teams: {', '.join(answer['teams'])}",
            f"expires: {iso(answer['expires'], 'never')}",
        ]
    )


def render_revoked(answer: dict[str, Any]) -> str:
    return f"revoked key {answer['id']} (teams: {', '.join(answer['teams'])})"


def budget(b: dict[str, Any] | None, currency: str) -> str:
    """A budget as ``teams list`` shows it: ``10 USD/month hard``, ``1000000 tokens/day soft``."""
    if not b:
        return "-"
    amounts = [f"{b['amount']} {currency}" if b.get("amount") is not None else ""]
    amounts.append(f"{b['tokens']} tokens" if b.get("tokens") else "")
    period = f"{b['window_seconds']}s" if b.get("period") == "rolling" else b.get("period", "month")
    return f"{' + '.join(a for a in amounts if a)}/{period} {b.get('mode', 'hard')}"


def render_teams(answer: dict[str, Any]) -> str:
    rows = [
        [
            t["id"],
            ",".join(t["models"]) if t.get("models") is not None else "all",
            pairs(t.get("limits") or {}),
            pairs(t.get("key_limits") or {}),
            f"{t['deadline']:g} s" if t.get("deadline") is not None else "-",
            budget(t.get("budget"), answer.get("currency", "")),
            budget(t.get("key_budget"), answer.get("currency", "")),
            ",".join(t.get("static_keys") or []) or "-",
        ]
        for t in answer.get("teams", [])
    ]
    heads = ["TEAM", "MODELS", "LIMITS", "KEY LIMITS", "DEADLINE", "BUDGET", "KEY BUDGET", "STATIC KEYS"]
    return table(heads, rows) if rows else "no teams"


def render_usage(answer: dict[str, Any]) -> str:
    buckets = answer.get("buckets", [])
    if not buckets:
        return f"team {answer.get('team')}: no usage in that time"
    rows = [
        [
            iso(b["start"]),
            str(b["requests"]),
            str(b["prompt_tokens"]),
            str(b["completion_tokens"]),
            " ".join(f"{kid}:{v.get('requests', 0)}" for kid, v in sorted(b.get("keys", {}).items())) or "-",
        ]
        for b in sorted(buckets, key=lambda b: b["start"])
    ]
    return table(["HOUR (UTC)", "REQUESTS", "PROMPT TOKENS", "COMPLETION TOKENS", "REQUESTS BY KEY"], rows)


def render_spend(answer: dict[str, Any]) -> str:
    names = ["team", "key"] if answer["group_by"] == "key" else [answer["group_by"]]
    head = f"spend per {answer['group_by']}, {answer['start']} to {answer['end']} ({answer['currency']})"
    rows = [[*(str(r[n]) for n in names), r["spend"]] for r in answer["rows"]]
    rows.append([*(["TOTAL"] + [""] * (len(names) - 1)), answer["total"]])
    unpriced = [f"{u['model']} on {u['target']}" for u in answer.get("unpriced", [])]
    tail = f"\nnot counted, no price: {', '.join(unpriced)}" if unpriced else ""
    return f"{head}\n{table([*(n.upper() for n in names), 'SPEND'], rows)}{tail}"


def spend_cmd(args: argparse.Namespace) -> int:
    query = f"group_by={args.group_by}&period={args.period}" + (f"&team={args.team}" if args.team else "")
    return show(args, admin_call(args, "GET", f"/admin/spend?{query}"), render_spend)


def keys_cmd(args: argparse.Namespace) -> int:
    if args.action == "create":
        body: dict[str, Any] = {"teams": args.team, "name": args.name or ""}
        if args.expires_in:
            body["expires_in"] = args.expires_in
        answer = admin_call(args, "POST", "/admin/keys", body)
        if isinstance(answer, dict) and answer.get("warning"):
            print(f"warning: {answer['warning']}", file=sys.stderr)  # beside the key, in --json too
        return show(args, answer, render_new_key)
    if args.action == "revoke":
        return show(args, admin_call(args, "DELETE", f"/admin/keys/{args.id}"), render_revoked)
    return show(args, admin_call(args, "GET", "/admin/keys"), render_keys)


def teams_cmd(args: argparse.Namespace) -> int:
    if args.action == "usage":
        return show(args, admin_call(args, "GET", f"/admin/teams/{args.team}/usage?hours={args.hours}"), render_usage)
    return show(args, admin_call(args, "GET", "/admin/teams"), render_teams)

"""Shared by the SDK drivers in this directory: the command line, the cases' fixed inputs, and the one
JSON line a driver prints. Each driver runs under its own SDK's virtual environment (.sdk-venvs/<sdk>),
so this module uses the standard library only, and pytest never imports it. Drivers are named
``drive_<sdk>.py``: a script called ``openai.py``, ``friendli.py`` or ``octoai.py`` would shadow the
SDK it imports, since a script's own directory comes first on sys.path.

A driver maps case names to functions. A success case returns ``result(...)``; the error cases make
the text-completion call with a wrong key, with ``--team`` naming a team the key is not in, or with a
malformed body (the ``BROKEN`` cases: a stream that fails midway), and the exception the SDK raises becomes ``{"ok": false, "status": <the HTTP status
the SDK surfaced>, "error": ...}``. An error case that unexpectedly succeeds reports its answer with
``ok: true``, so the test shows it. A case the SDK cannot express is absent from the driver's table and
prints ``{"ok": false, "error": "unsupported"}``.
"""

import argparse
import json
import sys
import traceback

PROMPT = "Hello gateway"
MESSAGES = [{"role": "user", "content": PROMPT}]
MAX_TOKENS = 5
SEED = 42  # for the Friendli completion cases (Friendli picks a random seed when none is given)
WRONG_KEY = "gw-wrong-key-not-issued"
MALFORMED = {"max_tokens": "many"}  # a wrong type: the gateway must answer 4xx
# The streaming cases again, the prompt asking the fake upstream for its in-stream error after two
# tokens: the SDK must raise, never end the stream as if it were complete.
BROKEN = {"stream_break": "stream", "chat_stream_break": "chat_stream"}
BREAK_MARKER = " [[fault:error_after=2]]"
CASES = ("complete", "stream", "chat", "chat_stream", "bad_key", "wrong_team", "malformed", *BROKEN)
KEYS = ("ok", "text", "finish_reason", "usage", "status", "error", "chunks")


def parse_args(flavours=None):
    p = argparse.ArgumentParser(description="Run one case of an SDK against the gateway; print one JSON line.")
    p.add_argument("--base-url", required=True, help="the gateway's root URL, no path")
    p.add_argument("--key", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--team", default=None, help="sent in the SDK's team/account/organization header; for the "
                   "wrong_team case, a team the key does not belong to")
    p.add_argument("--case", required=True, choices=CASES)
    if flavours:
        p.add_argument("--flavour", choices=flavours, default=flavours[0])
    args = p.parse_args()
    if args.case == "wrong_team" and not args.team:
        p.error("--case wrong_team needs --team (a team the key is not a member of)")
    args.base_url = args.base_url.rstrip("/")
    if args.case in BROKEN:
        global PROMPT, MESSAGES  # read by the drivers when they call, after this
        PROMPT += BREAK_MARKER
        MESSAGES = [{"role": "user", "content": PROMPT}]
    return args


def absent(value):
    """None, and what SDKs use for it: Speakeasy's UNSET, Friendli's string "null"."""
    return value is None or value == "null" or type(value).__name__ in ("Unset", "NotGiven", "Omit")


def plain(value):
    """An enum's value, or the value; None for the SDKs' absent markers."""
    if absent(value):
        return None
    return getattr(value, "value", value)


def dump(obj):
    """A usage object as a plain dict (pydantic v1 or v2 model, or already a dict)."""
    if absent(obj):
        return None
    for attr in ("model_dump", "dict"):
        if hasattr(obj, attr):
            return {k: v for k, v in getattr(obj, attr)().items() if not absent(v)}
    return obj


def result(text=None, finish_reason=None, usage=None, chunks=None):
    return {"text": text, "finish_reason": plain(finish_reason), "usage": dump(usage), "chunks": chunks}


class Collect:
    """Accumulates a stream: text pieces, the last non-null finish_reason, the last usage, a chunk count."""

    def __init__(self):
        self.text, self.finish, self.usage, self.chunks = "", None, None, 0

    def add(self, text=None, finish_reason=None, usage=None):
        self.text += text or ""
        if not absent(finish_reason):
            self.finish = finish_reason
        if not absent(usage):
            self.usage = usage

    def result(self):
        return result(self.text, self.finish, self.usage, self.chunks)


def attempt(fn):
    """One case of a driver that reports SDK calls as JSON: ``{"ok": True, **fn()}``, or the exception's
    class, HTTP status, error body and the body's ``error.type`` (traceback to stderr)."""
    try:
        return {"ok": True, **fn()}
    except Exception as exc:
        traceback.print_exc()
        body = getattr(exc, "body", None)
        kind = body.get("error", {}).get("type") if isinstance(body, dict) else None
        return {"ok": False, "error": type(exc).__name__, "status": getattr(exc, "status_code", None),
                "type": kind, "body": body}


def main(args, cases, status_of):
    """Run ``cases[args.case]`` and print exactly one JSON line on stdout (SDK chatter goes to stderr)."""
    out = sys.stdout
    sys.stdout = sys.stderr
    try:
        fn = cases.get(BROKEN.get(args.case, args.case))
        if fn is None:
            line = {"ok": False, "error": "unsupported"}
        else:
            try:
                line = {"ok": True, **fn()}
            except Exception as exc:  # the test reads the status the SDK surfaced
                traceback.print_exc()
                try:
                    status = status_of(exc)
                except Exception:
                    traceback.print_exc()
                    status = None
                line = {"ok": False, "status": status, "error": f"{type(exc).__module__}.{type(exc).__name__}: {exc}"}
    finally:
        sys.stdout = out
    line = {k: line.get(k) for k in KEYS}
    print(json.dumps(line, default=str), flush=True)

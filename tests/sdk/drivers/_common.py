"""Shared by every driver (each runs in its own SDK's venv, so only the standard library here)."""

import argparse
import json
import re
import sys
import traceback

PROMPT = "Hello gateway"
MESSAGES = [{"role": "user", "content": PROMPT}]


def args():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--team")
    p.add_argument("--case", required=True)
    p.add_argument("--flavour", default="serverless")
    return p.parse_args()


def emit(ok, text=None, finish_reason=None, usage=None, status=None, error=None, chunks=None):
    print(json.dumps({"ok": ok, "text": text, "finish_reason": finish_reason, "usage": usage,
                      "status": status, "error": error, "chunks": chunks}))


def status_in(message):
    m = re.search(r"\b([45]\d\d)\b", str(message))
    return int(m.group(1)) if m else None


def run(cases, case, status_of):
    fn = cases.get(case)
    if fn is None:
        emit(False, error="unsupported")
        return
    try:
        fn()
    except Exception as exc:  # the test reads the status the SDK surfaced
        emit(False, status=status_of(exc), error=f"{type(exc).__name__}: {exc}"[:500])
        traceback.print_exc(file=sys.stderr)


def dump(obj):
    if obj is None:
        return None
    for attr in ("model_dump", "dict"):
        if hasattr(obj, attr):
            return getattr(obj, attr)()
    return obj

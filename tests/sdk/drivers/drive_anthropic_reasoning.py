"""Driver for the Anthropic SDK with thinking and effort: ``Anthropic(api_key=<key>, base_url=<gw>)``
asks ``--model`` with an enabled thinking and its budget, adaptive thinking with an effort, both
streamed, an earlier turn's thinking sent back, and the deepest effort. Retries off. Run with
.sdk-venvs/anthropic/bin/python; prints one JSON object, case → ``{"ok": true, ...}`` with the blocks
the SDK read, or ``{"ok": false, "error": <exception class>, "status": ..., "message": ...}``.
"""

import argparse
import json
import sys

import _common as c
import anthropic

PROMPT = "Hello gateway"
ENABLED = {"type": "enabled", "budget_tokens": 1024}
THOUGHT = {"type": "thinking", "thinking": "Two and two.", "signature": ""}
TURNS = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": [THOUGHT, {"type": "text", "text": "4"}]},
    {"role": "user", "content": PROMPT},
]

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--key", required=True)
p.add_argument("--model", required=True)
a = p.parse_args()


def client():
    return anthropic.Anthropic(api_key=a.key, base_url=a.base_url.rstrip("/"), max_retries=0, timeout=30)


def read(msg, events=None):
    blocks = [b.model_dump() for b in msg.content]
    return {
        "blocks": [b["type"] for b in blocks],
        "text": "".join(b["text"] for b in blocks if b["type"] == "text"),
        "stop_reason": msg.stop_reason,
        "output_tokens": msg.usage.output_tokens,
        "events": events,
    }


def create(**kw):
    fields = {"model": a.model, "max_tokens": 16, "messages": [{"role": "user", "content": PROMPT}]} | kw
    return read(client().messages.create(**fields))


def stream(**kw):
    fields = {"model": a.model, "max_tokens": 16, "messages": [{"role": "user", "content": PROMPT}]} | kw
    with client().messages.stream(**fields) as s:
        events = sorted({ev.type for ev in s})
        return read(s.get_final_message(), events)


CASES = {
    "enabled": lambda: create(thinking=ENABLED),
    "adaptive_effort": lambda: create(thinking={"type": "adaptive"}, output_config={"effort": "high"}),
    "stream": lambda: stream(thinking=ENABLED, output_config={"effort": "low"}),
    "thoughts_back": lambda: create(thinking=ENABLED, messages=TURNS),
    "max_effort": lambda: create(thinking={"type": "adaptive"}, output_config={"effort": "max"}),
}


def run(fn):
    """``_common.attempt``, with the error body's message beside its type (the refusal's wording)."""
    got = c.attempt(fn)
    if not got["ok"]:
        body = got["body"]
        got["message"] = body.get("error", {}).get("message") if isinstance(body, dict) else None
    return got


out = sys.stdout
sys.stdout = sys.stderr
results = {name: run(fn) for name, fn in CASES.items()}
sys.stdout = out
print(json.dumps(results, default=str), flush=True)

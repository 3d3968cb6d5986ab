"""Driver for the Anthropic SDK (Stainless): ``Anthropic(api_key=<key>, base_url=<gw>)``, so it posts
/v1/messages and /v1/messages/count_tokens with the key as ``Authorization: Bearer`` (2.x) and the
team as ``anthropic-workspace-id``. Retries off. Run with .sdk-venvs/anthropic/bin/python.

Unlike the other drivers it runs every case in one process and prints one JSON object, case → result:
``{"ok": true, ...}`` with what the case saw, or ``{"ok": false, "error": <exception class>,
"status": <HTTP status>}`` for the exception the SDK raised. ``--dead-model`` names a model whose only
target refuses connections: three failures (502, ``api_error``) cool it down, then 529
(``overloaded_error``).
"""

import argparse
import json
import sys
import traceback

import anthropic

PROMPT = "Hello gateway"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

# a block only an Anthropic target takes: the gateway's copy for the schema lacks it
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}}

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--key", required=True)
p.add_argument("--model", required=True)
p.add_argument("--team", required=True)
p.add_argument("--other-team", required=True)
p.add_argument("--dead-model", required=True)
p.add_argument("--alias", required=True, help="a model id with a slash in it")
a = p.parse_args()


def client(key=a.key):
    return anthropic.Anthropic(api_key=key, base_url=a.base_url.rstrip("/"), max_retries=0, timeout=30)


def message(msg):
    blocks = [b.model_dump() for b in msg.content]
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    return {
        "text": text,
        "blocks": blocks,
        "stop_reason": msg.stop_reason,
        "stop_sequence": msg.stop_sequence,
        "usage": msg.usage.model_dump(exclude_none=True),
        "request_id": getattr(msg, "_request_id", None),  # a created message's: the request-id header
    }


def create(**kw):
    fields = {"model": a.model, "max_tokens": 8, "messages": [{"role": "user", "content": PROMPT}]} | kw
    return client().messages.create(**fields)


def stream(**kw):
    fields = {"model": a.model, "max_tokens": 8, "messages": [{"role": "user", "content": PROMPT}]} | kw
    events = []
    with client().messages.stream(**fields) as s:
        for ev in s:
            events.append(ev.type)
        final = s.get_final_message()
    return message(final) | {"events": events}


def tool_round_trip():
    first = create(max_tokens=50, tools=[WEATHER], tool_choice={"type": "any"})
    call = next(b for b in first.content if b.type == "tool_use")
    history = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ]
    second = create(messages=history, tools=[WEATHER])
    return {"first": message(first), "second": message(second), "call_id": call.id, "input": call.input}


def stop_sequences():
    word = create().content[0].text.split()[2]
    return message(create(stop_sequences=[word])) | {"asked": word}


def overloaded():
    seen = []
    for _ in range(4):
        try:
            create(model=a.dead_model)
        except anthropic.APIStatusError as exc:
            seen.append([type(exc).__name__, exc.status_code])
            if isinstance(exc, anthropic.OverloadedError):
                break  # cooling down (already, on a second run in the same gateway's life)
    return {"seen": seen}


CASES = {
    "create": lambda: message(create()),
    "stream": stream,
    "stream_tool": lambda: stream(max_tokens=50, tools=[WEATHER], tool_choice={"type": "any"}),
    "tool_round_trip": tool_round_trip,
    "stop_sequences": stop_sequences,
    "count_tokens": lambda: {
        "input_tokens": client()
        .messages.count_tokens(model=a.model, messages=[{"role": "user", "content": PROMPT}], system="Be brief.")
        .input_tokens
    },
    "models": lambda: {"ids": [m.id for m in client().models.list()]},
    # the SDK's auto-pagination, one model a page: forward (after_id = last_id), and backward from
    # the last model (before_id = first_id, once the first page was asked with before_id)
    "models_paged": lambda: {"ids": [m.id for m in client().models.list(limit=1)]},
    "models_all": lambda: {"ids": [m.id for m in client().models.list(limit=1000)]},
    "models_before": lambda: {
        "ids": [m.id for m in client().models.list(limit=1, before_id=client().models.list(limit=1000).last_id)]
    },
    "models_deprecated": lambda: {"ids": [m.id for m in client().models.list(lifecycle=["deprecated"])]},
    "models_active": lambda: {"ids": [m.id for m in client().models.list(lifecycle=["retired", "active"])]},
    "retrieve": lambda: client().models.retrieve(a.model).model_dump(mode="json"),
    "retrieve_alias": lambda: client().models.retrieve(a.alias).model_dump(mode="json"),
    "retrieve_missing": lambda: client().models.retrieve("no-such-model").model_dump(mode="json"),
    "models_bad_limit": lambda: {"ids": [m.id for m in client().models.list(limit=0)]},
    # each error type, as the SDK's own exception class
    "invalid_request_error": lambda: create(max_tokens=0),
    "authentication_error": lambda: client("gw-wrong-key-not-issued").messages.create(
        model=a.model, max_tokens=8, messages=[{"role": "user", "content": PROMPT}]
    ),
    "permission_error": lambda: create(workspace_id=a.other_team),
    "not_found_error": lambda: create(model="no-such-model"),
    "request_too_large": lambda: create(messages=[{"role": "user", "content": "x" * (9 * 1024 * 1024)}]),
    "rate_limit_error": lambda: create(messages=[{"role": "user", "content": "[[fault:status=429,retry_after=7]]"}]),
    "api_error": lambda: create(messages=[{"role": "user", "content": "[[fault:status=500]]"}]),
    "overloaded_error": overloaded,
    # refusals before any route's work: a path or method no route takes, a body the schema refuses
    "wrong_path": lambda: client().post("/v1/messages/batches/x", cast_to=object, body={}),
    "unserved_api": lambda: {"ids": [f.id for f in client().beta.files.list()]},  # GET /v1/files: a shared path
    "wrong_method": lambda: client().get("/v1/messages", cast_to=object),
    "native_block_index": lambda: create(
        messages=[{"role": "user", "content": [DOCUMENT, {"type": "text", "text": ""}]}]
    ),
    "not_an_object": lambda: create(messages=[{"role": "user", "content": PROMPT}, 7]),
}


def run(fn):
    try:
        return {"ok": True, **fn()}
    except Exception as exc:
        traceback.print_exc()
        status = getattr(exc, "status_code", None)
        headers = getattr(getattr(exc, "response", None), "headers", {}) or {}
        body = getattr(exc, "body", None)
        kind = body.get("error", {}).get("type") if isinstance(body, dict) else None
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        envelope = body.get("type") if isinstance(body, dict) else None  # Anthropic's: "error"
        return {"ok": False, "error": type(exc).__name__, "status": status, "type": kind, "envelope": envelope,
                "retry_after": headers.get("retry-after"), "message": message,
                "request_id": getattr(exc, "request_id", None)}


out = sys.stdout
sys.stdout = sys.stderr
results = {name: run(fn) for name, fn in CASES.items()}
sys.stdout = out
print(json.dumps(results, default=str), flush=True)

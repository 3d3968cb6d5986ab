"""Driver for the openai SDK against a model whose target is Anthropic's API (the fake's Anthropic
wire behind the gateway): chat, a streamed chat, and tools whole and streamed (the tool call's
arguments joined from the stream's deltas, as an OpenAI client joins them). Retries off. Run with
.sdk-venvs/openai/bin/python; prints one JSON object, case → result.
"""

import argparse
import json
import sys
import traceback

import openai

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello gateway"}]

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--key", required=True)
p.add_argument("--model", required=True)
a = p.parse_args()
client = openai.OpenAI(api_key=a.key, base_url=a.base_url.rstrip("/") + "/v1", max_retries=0, timeout=30)


def chat():
    r = client.chat.completions.create(model=a.model, messages=MESSAGES, max_tokens=8)
    return {"text": r.choices[0].message.content, "finish_reason": r.choices[0].finish_reason,
            "usage": r.usage.model_dump(exclude_none=True)}


def stream(**kw):
    text, finish, usage, calls = "", None, None, {}
    s = client.chat.completions.create(model=a.model, messages=MESSAGES, max_tokens=kw.pop("max_tokens", 8),
                                       stream=True, stream_options={"include_usage": True}, **kw)
    for chunk in s:
        for ch in chunk.choices:
            text += ch.delta.content or ""
            for call in ch.delta.tool_calls or ():
                slot = calls.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["name"] = call.function.name or slot["name"]
                    slot["arguments"] += call.function.arguments or ""
            finish = ch.finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(exclude_none=True)
    return {"text": text, "finish_reason": finish, "usage": usage, "calls": [calls[i] for i in sorted(calls)]}


def tools():
    r = client.chat.completions.create(model=a.model, messages=MESSAGES, max_tokens=50, tools=[WEATHER],
                                       tool_choice="required")
    msg = r.choices[0].message
    calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in msg.tool_calls or ()]
    return {"finish_reason": r.choices[0].finish_reason, "calls": calls}


CASES = {
    "chat": chat,
    "chat_stream": stream,
    "tools": tools,
    "tools_stream": lambda: stream(max_tokens=50, tools=[WEATHER], tool_choice="required"),
}


def run(fn):
    try:
        return {"ok": True, **fn()}
    except Exception as exc:
        traceback.print_exc()
        return {"ok": False, "error": type(exc).__name__, "status": getattr(exc, "status_code", None)}


out = sys.stdout
sys.stdout = sys.stderr
results = {name: run(fn) for name, fn in CASES.items()}
sys.stdout = out
print(json.dumps(results, default=str), flush=True)

"""Driver for the Anthropic SDK against the gateway in front of real vLLM (tests/vllm): every request
greedy (temperature 0, in ``extra_body``: SDK 2.x has no typed sampling fields). Run with
.sdk-venvs/anthropic/bin/python; prints one JSON object, case → result (``{"ok": true, ...}`` or
``{"ok": false, "error": <exception class>, "status": ..., "type": ...}``).

The stop-sequence case picks its sequence from the whole answer it just got (a stretch from the middle
of the text, first seen after the start), so nothing about the model's output is written down here.
"""

import argparse
import json
import sys

import anthropic

import _common as c

PROMPT = "the quick brown fox"
MAX_TOKENS = 16
TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"],
    },
}

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--key", required=True)
p.add_argument("--model", required=True)
a = p.parse_args()
CLIENT = anthropic.Anthropic(api_key=a.key, base_url=a.base_url.rstrip("/"), max_retries=0, timeout=120)


def fields(**kw):
    # 2.x types no sampling fields (Claude's newer models refuse them); the wire still takes them
    return {"model": a.model, "max_tokens": MAX_TOKENS, "extra_body": {"temperature": 0},
            "messages": [{"role": "user", "content": PROMPT}]} | kw


def message(msg):
    blocks = [b.model_dump() for b in msg.content]
    return {
        "text": "".join(b["text"] for b in blocks if b["type"] == "text"),
        "blocks": blocks,
        "stop_reason": msg.stop_reason,
        "stop_sequence": msg.stop_sequence,
        "usage": msg.usage.model_dump(exclude_none=True),
    }


def stream():
    events = []
    with CLIENT.messages.stream(**fields()) as s:
        for ev in s:
            events.append(ev.type)
        final = s.get_final_message()
    return message(final) | {"events": events}


def pick_sequence(text):
    """Three characters from the middle whose first occurrence is after the start and not blank."""
    for start in range(len(text) // 2, len(text) - 2):
        seq = text[start:start + 3]
        if seq.strip() == seq and "\ufffd" not in seq and text.index(seq) > 0:
            return seq
    raise ValueError(f"no stop sequence to pick from {text!r}")


def stop_sequences():
    whole = CLIENT.messages.create(**fields()).content[0].text
    seq = pick_sequence(whole)
    return message(CLIENT.messages.create(**fields(stop_sequences=[seq]))) | {"asked": seq, "whole": whole}


CASES = {
    "create": lambda: message(CLIENT.messages.create(**fields())),
    "stream": stream,
    "stop_sequences": stop_sequences,
    "tool_any": lambda: message(
        CLIENT.messages.create(**fields(max_tokens=64, tools=[TOOL], tool_choice={"type": "any"}))
    ),
    # the prompts of create and tool_any, counted by the gateway (vLLM's /tokenize)
    "count_tokens": lambda: {"input_tokens": CLIENT.messages.count_tokens(
        model=a.model, messages=[{"role": "user", "content": PROMPT}]).input_tokens},
    "count_tokens_tools": lambda: {"input_tokens": CLIENT.messages.count_tokens(
        model=a.model, messages=[{"role": "user", "content": PROMPT}], tools=[TOOL],
        tool_choice={"type": "any"}).input_tokens},
}


run = c.attempt


out = sys.stdout
sys.stdout = sys.stderr
results = {name: run(fn) for name, fn in CASES.items()}
sys.stdout = out
print(json.dumps(results, default=str), flush=True)

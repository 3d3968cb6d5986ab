"""Rich valid request bodies, one per ingress dialect's kind (chat, completion, Anthropic Messages,
Responses, embeddings), each holding the nested structures a client sends (content parts, tools, tool
calls and results, thinking), and the means to lay a hostile value at any depth of one: for property
tests of the dialects' parsers and of the gateway's answers.

What does not belong here: assertions, or bodies for one test's own point.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

JSON = Any
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
CHAT = {
    "model": "m",
    "max_tokens": 4,
    "messages": [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:,"}}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ],
    "tools": [TOOL],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "stop": ["x"],
    "logit_bias": {"5": 1},
}
COMPLETION = {"model": "m", "max_tokens": 4, "prompt": ["hi", "there"], "stop": ["x"], "logprobs": 1, "seed": 3}
MESSAGES = {
    "model": "m",
    "max_tokens": 4,
    "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}]}],
        },
    ],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "output_config": {"effort": "low"},
    "metadata": {"user_id": "u"},
}
RESPONSE = {
    "model": "m",
    "max_output_tokens": 4,
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]},
    ],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": "auto",
    "text": {"format": {"type": "json_object"}},
    "reasoning": {"effort": "low"},
}
EMBEDDING = {"model": "e", "input": [[1, 2, 3], [4, 5]], "encoding_format": "float", "dimensions": 8}
HOSTILE = st.one_of(
    st.sampled_from([None, True, 0, -1, 1.5, 2**64, "", "x", "text", "function", [], {}, [None], [[]], [{}]]),
    st.lists(st.sampled_from(["text", "function", "low", 1, None]), min_size=1, max_size=2),
    st.dictionaries(st.sampled_from(["type", "text", "a"]), st.sampled_from(["text", 1, None]), min_size=1, max_size=2),
)


def paths(node: JSON, at: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every node's path under ``node``: the ones a hostile value may replace."""
    out = [at] if at else []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out += paths(value, (*at, key))
    return out


def replaced(body: dict[str, JSON], at: tuple[str | int, ...], value: JSON) -> dict[str, JSON]:
    out = copy.deepcopy(body)
    node: JSON = out
    for key in at[:-1]:
        node = node[key]
    node[at[-1]] = value
    return out


@st.composite
def mutations(draw: st.DrawFn, body: dict[str, JSON]) -> tuple[tuple[tuple[str | int, ...], ...], dict[str, JSON]]:
    """``body`` with one or two of its nodes replaced by hostile values, and the paths replaced."""
    done = []
    for _ in range(draw(st.integers(1, 2))):
        at = draw(st.sampled_from(paths(body)))
        body = replaced(body, at, draw(HOSTILE))
        done.append(at)
    return tuple(done), body

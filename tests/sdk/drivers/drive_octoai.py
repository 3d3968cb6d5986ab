"""Driver for octoai 1.11.0 (Fern, the last OctoAI SDK): ``OctoAI(environment=OctoAIEnvironment(
text_gen=<gw>, ...))`` posts /v1/completions and /v1/chat/completions with a bearer key. OctoAI has no
team, account or organization header, so ``wrong_team`` is unsupported. No retries by default.

Quirks (clients.md §6): ``OCTOAI_TOKEN`` is read at import time (the key is passed explicitly here);
streams need ``Content-Type: text/event-stream`` and chunks the SDK cannot parse are dropped silently,
which the test catches by comparing the streamed text with the non-streamed one. The malformed case
passes a wrong-typed ``max_tokens`` straight to ``create_completion``, which does not validate it.
``request_options={"additional_body_parameters": ...}`` is no way to send it: on a method with a JSON
body, this SDK version hands the extra dict to httpx as ``data=`` too, and httpx then sends a
form-encoded body holding only the extra keys.
Run with .sdk-venvs/octoai/bin/python; prints one JSON line (see _common.py).
"""

import _common as c
from octoai.client import OctoAI
from octoai.core.api_error import ApiError
from octoai.environment import OctoAIEnvironment

a = c.parse_args()


def client(key=a.key):
    env = OctoAIEnvironment(default=a.base_url, image_gen=a.base_url, text_gen=a.base_url)
    return OctoAI(api_key=key, environment=env, timeout=30)


def complete(key=a.key, max_tokens=c.MAX_TOKENS):
    r = client(key).text_gen.create_completion(model=a.model, prompt=c.PROMPT, max_tokens=max_tokens)
    return c.result(r.choices[0].text, r.choices[0].finish_reason, r.usage)


def stream():
    acc = c.Collect()
    s = client().text_gen.create_completion_stream(
        model=a.model, prompt=c.PROMPT, max_tokens=c.MAX_TOKENS, stream_options={"include_usage": True}
    )
    for chunk in s:
        acc.chunks += 1
        for ch in chunk.choices:
            acc.add(ch.text, ch.finish_reason)
        acc.add(usage=chunk.usage)
    return acc.result()


def chat():
    r = client().text_gen.create_chat_completion(model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS)
    ch = r.choices[0]
    return c.result(ch.message.content, ch.finish_reason, r.usage)


def chat_stream():
    acc = c.Collect()
    s = client().text_gen.create_chat_completion_stream(
        model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS, stream_options={"include_usage": True}
    )
    for chunk in s:
        acc.chunks += 1
        for ch in chunk.choices:
            acc.add(ch.delta.content if ch.delta else None, ch.finish_reason)
        acc.add(usage=getattr(chunk, "usage", None))
    return acc.result()


c.main(
    a,
    {
        "complete": complete,
        "stream": stream,
        "chat": chat,
        "chat_stream": chat_stream,
        "bad_key": lambda: complete(key=c.WRONG_KEY),
        # the SDK sends its arguments as given, unvalidated
        "malformed": lambda: complete(max_tokens=c.MALFORMED["max_tokens"]),
    },
    lambda exc: exc.status_code if isinstance(exc, ApiError) else None,
)

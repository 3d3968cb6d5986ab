"""Driver for octoai-sdk 0.10.1 (the legacy OctoAI SDK). It has no base-URL option and no text
completion method: completions go through the generic ``client.infer(url, body)`` and
``client.infer_stream(url, body)`` to <gw>/v1/completions, and chat through
``client.chat.completions.create`` after pointing the per-instance ``endpoint`` attribute at
<gw>/v1/chat/completions. OctoAI has no team header, so ``wrong_team`` is unsupported.

Quirks (clients.md §7): the HTTP status exists only inside the error message ("Error: 401 ..."), so
it is parsed from there; ``infer`` retries 5xx and 429 about four times with 1+2+4+8 s backoff and
offers no way to turn that off (4xx are not retried, so the error cases surface at once).
Run with .sdk-venvs/octoai-sdk/bin/python; prints one JSON line (see _common.py).
"""

import re

import _common as c
from octoai.client import Client

a = c.parse_args()
URL = a.base_url + "/v1/completions"
BODY = {"model": a.model, "prompt": c.PROMPT, "max_tokens": c.MAX_TOKENS}


def client(key=a.key):
    cl = Client(token=key, timeout=30)
    cl.chat.completions.endpoint = a.base_url + "/v1/chat/completions"
    return cl


def complete(key=a.key, body=BODY):
    r = client(key).infer(URL, body)
    ch = r["choices"][0]
    return c.result(ch["text"], ch.get("finish_reason"), r.get("usage"))


def stream():
    acc = c.Collect()
    for chunk in client().infer_stream(URL, {**BODY, "stream": True}):
        acc.chunks += 1
        for ch in chunk.get("choices") or []:
            acc.add(ch.get("text"), ch.get("finish_reason"))
        acc.add(usage=chunk.get("usage"))
    return acc.result()


def chat():
    r = client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS)
    ch = r.choices[0]
    return c.result(ch.message.content, ch.finish_reason, r.usage)


def chat_stream():
    acc = c.Collect()
    s = client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS, stream=True)
    for chunk in s:
        acc.chunks += 1
        for ch in chunk.choices:
            acc.add(ch.delta.content if ch.delta else None, ch.finish_reason)
        acc.add(usage=chunk.usage)
    return acc.result()


def status_of(exc):
    m = re.match(r"(?:Error|Rate limit reached error|Server error): (\d{3}) ", str(exc))
    return int(m.group(1)) if m else None


c.main(
    a,
    {
        "complete": complete,
        "stream": stream,
        "chat": chat,
        "chat_stream": chat_stream,
        "bad_key": lambda: complete(key=c.WRONG_KEY),
        "malformed": lambda: complete(body={**BODY, **c.MALFORMED}),
    },
    status_of,
)

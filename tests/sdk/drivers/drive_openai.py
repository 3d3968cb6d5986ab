"""Driver for the openai SDK (Stainless): ``OpenAI(base_url=<gw>/v1, organization=<team>)``, so it
posts /v1/completions and /v1/chat/completions with ``OpenAI-Organization: <team>``. Retries off.
Run with .sdk-venvs/openai/bin/python; prints one JSON line (see _common.py).
"""

import _common as c
import openai

a = c.parse_args()


def client(key=a.key):
    return openai.OpenAI(api_key=key, base_url=a.base_url + "/v1", organization=a.team, max_retries=0, timeout=30)


def complete(key=a.key, extra_body=None):
    r = client(key).completions.create(
        model=a.model, prompt=c.PROMPT, max_tokens=c.MAX_TOKENS, extra_body=extra_body
    )
    return c.result(r.choices[0].text, r.choices[0].finish_reason, r.usage)


def stream():
    acc = c.Collect()
    s = client().completions.create(
        model=a.model, prompt=c.PROMPT, max_tokens=c.MAX_TOKENS, stream=True, stream_options={"include_usage": True}
    )
    for chunk in s:
        acc.chunks += 1
        for ch in chunk.choices:
            acc.add(ch.text, ch.finish_reason)
        acc.add(usage=chunk.usage)
    return acc.result()


def chat():
    r = client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS)
    return c.result(r.choices[0].message.content, r.choices[0].finish_reason, r.usage)


def chat_stream():
    acc = c.Collect()
    s = client().chat.completions.create(
        model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS, stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in s:
        acc.chunks += 1
        for ch in chunk.choices:
            acc.add(ch.delta.content if ch.delta else None, ch.finish_reason)
        acc.add(usage=chunk.usage)
    return acc.result()


c.main(
    a,
    {
        "complete": complete,
        "stream": stream,
        "chat": chat,
        "chat_stream": chat_stream,
        "bad_key": lambda: complete(key=c.WRONG_KEY),
        "wrong_team": complete,  # --team names a team the key is not in
        "malformed": lambda: complete(extra_body=c.MALFORMED),
    },
    lambda exc: exc.status_code if isinstance(exc, openai.APIStatusError) else None,
)

"""Driver for both Scale SGP SDKs (Stainless, "SGPClient"), whichever the running venv has:
scale-gp 0.1.0a62 posts /v4/beta/... through ``client.beta``; scale-gp-beta 0.7.0 posts /v5/... directly
(its ``account_id`` is mandatory). Both send ``x-api-key`` and ``x-selected-account-id: <team>``. Model
names are SGP-style ``vendor/model`` (``openai/<--model>``). Scale streams end without ``[DONE]``.
Retries off. Run with .sdk-venvs/scale-gp*/bin/python; prints one JSON line (see _common.py).
"""

import _common as c

try:  # the two SDKs install different top-level packages; each venv has exactly one
    import scale_gp_beta as sgp

    def api(cl):
        return cl
except ImportError:
    import scale_gp as sgp

    def api(cl):
        return cl.beta


SGPClient = sgp.SGPClient

a = c.parse_args()
MODEL = "openai/" + a.model


def client(key=a.key):
    return SGPClient(api_key=key, account_id=a.team, base_url=a.base_url, max_retries=0, timeout=30)


def complete(key=a.key, extra_body=None):
    r = api(client(key)).completions.create(model=MODEL, prompt=c.PROMPT, max_tokens=c.MAX_TOKENS, extra_body=extra_body)
    return c.result(r.choices[0].text, r.choices[0].finish_reason, r.usage)


def stream():
    acc = c.Collect()
    s = api(client()).completions.create(
        model=MODEL, prompt=c.PROMPT, max_tokens=c.MAX_TOKENS, stream=True, stream_options={"include_usage": True}
    )
    for chunk in s:
        acc.chunks += 1
        for ch in chunk.choices or []:
            acc.add(ch.text, ch.finish_reason)
        acc.add(usage=chunk.usage)
    return acc.result()


def chat():
    r = api(client()).chat.completions.create(model=MODEL, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS)
    ch = r.choices[0]
    return c.result(ch.message.content, ch.finish_reason, r.usage)


def chat_stream():
    acc = c.Collect()
    s = api(client()).chat.completions.create(
        model=MODEL, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS, stream=True, stream_options={"include_usage": True}
    )
    for chunk in s:
        acc.chunks += 1
        for ch in chunk.choices or []:
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
        "wrong_team": complete,  # --team names an account the key is not in
        "malformed": lambda: complete(extra_body=c.MALFORMED),
    },
    lambda exc: exc.status_code if isinstance(exc, sgp.APIStatusError) else None,
)

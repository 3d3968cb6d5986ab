"""Driver for friendli-client 1.5.8 (the legacy FriendliAI client): ``Friendli(base_url=<gw>,
team_id=<team>)`` posts /v1/completions and /v1/chat/completions with ``X-Friendli-Team``, sending
every parameter key (mostly null), and reads the 2024 completion stream (``token_sampled`` lines, then
a final ``Completion`` object that ends the iteration).

Quirks (clients.md §4): token and team live in module globals written by the constructor, so the
client is built right before its call; importing it creates ~/.friendli (the test gives it a
throwaway HOME); an HTTP error surfaces as ``APIError`` whose status is only on
``err.__cause__.response.status_code``. The SDK has no retries. Its ``Completion`` model has no
``finish_reason`` (pydantic drops the key), so completion cases report ``finish_reason: null``.
Completions carry a fixed ``seed`` (a list, in this SDK): Friendli chooses a random one when none is
given, so an unseeded stream and whole answer would differ.
Run with .sdk-venvs/friendli-client/bin/python; prints one JSON line (see _common.py).
"""

import _common as c
import httpx
from friendli import Friendli

a = c.parse_args()


def client(key=a.key):
    return Friendli(token=key, team_id=a.team, base_url=a.base_url)


def complete(key=a.key, max_tokens=c.MAX_TOKENS):
    r = client(key).completions.create(
        model=a.model, prompt=c.PROMPT, max_tokens=max_tokens, seed=[c.SEED], stream=False
    )
    return c.result(r.choices[0].text, None, r.usage)


def stream():
    acc = c.Collect()
    s = client().completions.create(
        model=a.model, prompt=c.PROMPT, max_tokens=c.MAX_TOKENS, seed=[c.SEED], stream=True
    )
    for line in s:
        acc.chunks += 1
        acc.add(line.text)
    return acc.result()


def chat():
    r = client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS, stream=False)
    ch = r.choices[0]
    return c.result(ch.message.content, ch.finish_reason, r.usage)


def chat_stream():
    acc = c.Collect()
    s = client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS, stream=True)
    for chunk in s:
        acc.chunks += 1
        for ch in chunk.choices:
            acc.add(ch.delta.content, ch.finish_reason)
    return acc.result()


def status_of(exc):
    cause = exc.__cause__
    return cause.response.status_code if isinstance(cause, httpx.HTTPStatusError) else None


c.main(
    a,
    {
        "complete": complete,
        "stream": stream,
        "chat": chat,
        "chat_stream": chat_stream,
        "bad_key": lambda: complete(key=c.WRONG_KEY),
        "wrong_team": complete,  # --team names a team the key is not in
        # the SDK sends its arguments as given, unvalidated
        "malformed": lambda: complete(max_tokens=c.MALFORMED["max_tokens"]),
    },
    status_of,
)

"""friendli-client 1.5.8 (legacy): base_url=<gw>, posts /v1/completions with every key (mostly null)
and reads the 2024 stream (token_sampled lines, then a complete object). It keeps token and team in
module globals, so a client is built right before each call (clients.md §4)."""

import _common as c
from friendli import Friendli

a = c.args()


def client(key=a.key, team=a.team):
    return Friendli(token=key, team_id=team, base_url=a.base_url)


def complete():
    r = client().completions.create(model=a.model, prompt=c.PROMPT, max_tokens=5, stream=False)
    ch = r.choices[0]
    # friendli-client's 2024 Completion model has no finish_reason and drops unknown keys
    c.emit(True, ch.text, getattr(ch, "finish_reason", None) or "not-exposed", c.dump(r.usage))


def stream():
    text, n = "", 0
    s = client().completions.create(model=a.model, prompt=c.PROMPT, max_tokens=5, stream=True)
    for line in s:
        n += 1
        text += line.text
    final = s.completion if hasattr(s, "completion") else None
    finish = final.choices[0].finish_reason if final is not None and hasattr(final.choices[0], "finish_reason") else None
    c.emit(True, text, finish or "length", chunks=n)


def chat():
    r = client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=5, stream=False)
    c.emit(True, r.choices[0].message.content, r.choices[0].finish_reason, c.dump(r.usage))


def chat_stream():
    text, finish, n = "", None, 0
    for chunk in client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=5, stream=True):
        n += 1
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    c.emit(True, text, finish, chunks=n)


def bad_key():
    client(key="wrong-key").completions.create(model=a.model, prompt=c.PROMPT, max_tokens=5, stream=False)


def wrong_team():
    client(team="team2").completions.create(model=a.model, prompt=c.PROMPT, max_tokens=5, stream=False)


def malformed():
    client().completions.create(model=a.model, prompt=c.PROMPT, max_tokens="many", stream=False)


def status_of(exc):
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    return getattr(response, "status_code", None) or c.status_in(exc)


c.run(dict(complete=complete, stream=stream, chat=chat, chat_stream=chat_stream, bad_key=bad_key,
           wrong_team=wrong_team, malformed=malformed), a.case, status_of)

"""scale-gp (/v4/beta) and scale-gp-beta (/v5): x-api-key, account id as team, vendor/model names."""

import _common as c

a = c.args()
try:
    from scale_gp_beta import SGPClient  # scale-gp-beta: /v5
    BETA = True
except ImportError:
    from scale_gp import SGPClient  # scale-gp: /v4/beta
    BETA = False
MODEL = "openai/" + a.model


def client(key=a.key, team=a.team):
    return SGPClient(api_key=key, account_id=team or "team1", base_url=a.base_url, max_retries=0)


def completions(cl):
    return cl.completions if BETA else cl.beta.completions


def chats(cl):
    return cl.chat.completions if BETA else cl.beta.chat.completions


def complete():
    r = completions(client()).create(model=MODEL, prompt=c.PROMPT, max_tokens=5)
    c.emit(True, r.choices[0].text, r.choices[0].finish_reason, c.dump(r.usage))


def stream():
    text, finish, usage, n = "", None, None, 0
    for chunk in completions(client()).create(model=MODEL, prompt=c.PROMPT, max_tokens=5, stream=True):
        n += 1
        for ch in chunk.choices or []:
            text += ch.text or ""
            finish = ch.finish_reason or finish
        usage = c.dump(getattr(chunk, "usage", None)) or usage
    c.emit(True, text, finish, usage, chunks=n)


def message_text(choice):
    msg = getattr(choice, "message", None)
    return msg.content if msg is not None else None


def chat():
    r = chats(client()).create(model=MODEL, messages=c.MESSAGES, max_tokens=5)
    c.emit(True, message_text(r.choices[0]), r.choices[0].finish_reason, c.dump(getattr(r, "usage", None)))


def chat_stream():
    text, finish, n = "", None, 0
    for chunk in chats(client()).create(model=MODEL, messages=c.MESSAGES, max_tokens=5, stream=True):
        n += 1
        for ch in chunk.choices or []:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    c.emit(True, text, finish, chunks=n)


def bad_key():
    completions(client(key="wrong-key")).create(model=MODEL, prompt=c.PROMPT, max_tokens=5)


def wrong_team():
    completions(client(team="team2")).create(model=MODEL, prompt=c.PROMPT, max_tokens=5)


def malformed():
    completions(client()).create(model=MODEL, prompt=c.PROMPT, extra_body={"max_tokens": "many"})


c.run(dict(complete=complete, stream=stream, chat=chat, chat_stream=chat_stream, bad_key=bad_key,
           wrong_team=wrong_team, malformed=malformed), a.case, lambda e: getattr(e, "status_code", None))

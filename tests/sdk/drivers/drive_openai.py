"""The openai SDK against the gateway: base_url=<gw>/v1, team via organization (OpenAI-Organization)."""

import _common as c
import openai

a = c.args()


def client(key=a.key, team=a.team):
    return openai.OpenAI(api_key=key, base_url=a.base_url + "/v1", organization=team, max_retries=0)


def complete():
    r = client().completions.create(model=a.model, prompt=c.PROMPT, max_tokens=5)
    c.emit(True, r.choices[0].text, r.choices[0].finish_reason, c.dump(r.usage))


def stream():
    text, finish, usage, n = "", None, None, 0
    s = client().completions.create(model=a.model, prompt=c.PROMPT, max_tokens=5, stream=True,
                                    stream_options={"include_usage": True})
    for chunk in s:
        n += 1
        for ch in chunk.choices:
            text += ch.text
            finish = ch.finish_reason or finish
        usage = c.dump(chunk.usage) or usage
    c.emit(True, text, finish, usage, chunks=n)


def chat():
    r = client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=5)
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
    client(key="wrong-key").completions.create(model=a.model, prompt=c.PROMPT, max_tokens=5)


def wrong_team():
    client(team="team2").completions.create(model=a.model, prompt=c.PROMPT, max_tokens=5)


def malformed():
    client().completions.create(model=a.model, prompt=c.PROMPT, extra_body={"max_tokens": "many"})


c.run(dict(complete=complete, stream=stream, chat=chat, chat_stream=chat_stream, bad_key=bad_key,
           wrong_team=wrong_team, malformed=malformed), a.case, lambda e: getattr(e, "status_code", None))

"""octoai-sdk 0.10 (legacy): no completions method, so client.infer(url, body); chat endpoint is a
per-instance attribute. The HTTP status exists only inside error messages."""

import _common as c
from octoai.client import Client

a = c.args()
URL = a.base_url + "/v1/completions"
BODY = {"model": a.model, "prompt": c.PROMPT, "max_tokens": 5}


def client(key=a.key):
    cl = Client(token=key, timeout=60)
    cl.chat.completions.endpoint = a.base_url + "/v1/chat/completions"
    return cl


def complete():
    r = client().infer(URL, BODY)
    c.emit(True, r["choices"][0]["text"], r["choices"][0]["finish_reason"], r.get("usage"))


def stream():
    text, finish, usage, n = "", None, None, 0
    for chunk in client().infer_stream(URL, {**BODY, "stream": True, "stream_options": {"include_usage": True}}):
        n += 1
        for ch in chunk.get("choices", []):
            text += ch.get("text") or ""
            finish = ch.get("finish_reason") or finish
        usage = chunk.get("usage") or usage
    c.emit(True, text, finish, usage, chunks=n)


def chat():
    r = client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=5)
    c.emit(True, r.choices[0].message.content, r.choices[0].finish_reason, c.dump(r.usage))


def chat_stream():
    text, finish, n = "", None, 0
    for chunk in client().chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=5, stream=True):
        n += 1
        for ch in chunk.choices:
            text += (ch.delta.content if ch.delta else None) or ""
            finish = ch.finish_reason or finish
    c.emit(True, text, finish, chunks=n)


def bad_key():
    client(key="wrong-key").infer(URL, BODY)


def malformed():
    client().infer(URL, {**BODY, "max_tokens": "many"})


c.run(dict(complete=complete, stream=stream, chat=chat, chat_stream=chat_stream, bad_key=bad_key,
           malformed=malformed), a.case, lambda e: c.status_in(e))

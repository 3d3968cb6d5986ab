"""octoai 1.11 (Fern): environment.text_gen=<gw>; no team header exists in this dialect."""

import _common as c
from octoai.client import OctoAI
from octoai.environment import OctoAIEnvironment

a = c.args()


def client(key=a.key):
    env = OctoAIEnvironment(default=a.base_url, image_gen=a.base_url, text_gen=a.base_url)
    return OctoAI(api_key=key, environment=env, timeout=60)


def complete():
    r = client().text_gen.create_completion(model=a.model, prompt=c.PROMPT, max_tokens=5)
    c.emit(True, r.choices[0].text, r.choices[0].finish_reason, c.dump(r.usage))


def stream():
    text, finish, usage, n = "", None, None, 0
    for chunk in client().text_gen.create_completion_stream(model=a.model, prompt=c.PROMPT, max_tokens=5):
        n += 1
        for ch in chunk.choices:
            text += ch.text or ""
            finish = ch.finish_reason or finish
        usage = c.dump(chunk.usage) or usage
    c.emit(True, text, finish, usage, chunks=n)


def chat():
    r = client().text_gen.create_chat_completion(model=a.model, messages=c.MESSAGES, max_tokens=5)
    c.emit(True, r.choices[0].message.content, r.choices[0].finish_reason, c.dump(r.usage))


def chat_stream():
    text, finish, n = "", None, 0
    for chunk in client().text_gen.create_chat_completion_stream(model=a.model, messages=c.MESSAGES, max_tokens=5):
        n += 1
        for ch in chunk.choices:
            text += (ch.delta.content if ch.delta else None) or ""
            finish = ch.finish_reason or finish
    c.emit(True, text, finish, chunks=n)


def bad_key():
    client(key="wrong-key").text_gen.create_completion(model=a.model, prompt=c.PROMPT, max_tokens=5)


def malformed():
    client().text_gen.create_completion(model=a.model, prompt=c.PROMPT, request_options={
        "additional_body_parameters": {"max_tokens": "many"}})


c.run(dict(complete=complete, stream=stream, chat=chat, chat_stream=chat_stream, bad_key=bad_key,
           malformed=malformed), a.case, lambda e: getattr(e, "status_code", None))

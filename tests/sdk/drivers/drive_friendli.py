"""friendli 0.16 (Speakeasy): server_url=<gw>; serverless, dedicated and container flavours; the team
header only when x_friendli_team= is passed per call (clients.md §3)."""

import json

import _common as c
import httpx
from friendli import SyncFriendli
from friendli.core.utils.retries import RetryConfig

a = c.args()
NO_RETRY = RetryConfig("none", None, False)


class Rewrite(httpx.HTTPTransport):
    """The SDK validates bodies before sending; a malformed one is made on the wire instead."""

    def handle_request(self, request):
        body = json.loads(request.content)
        body["max_tokens"] = "many"
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        request = httpx.Request(request.method, request.url, headers=headers, content=json.dumps(body).encode())
        return super().handle_request(request)


def client(key=a.key, malformed=False):
    http = httpx.Client(transport=Rewrite()) if malformed else None
    return SyncFriendli(token=key, server_url=a.base_url, retry_config=NO_RETRY, client=http)


def call(cl, body, team=a.team):
    if a.flavour == "container":
        return cl.container.completions.complete(request=body, server_url=a.base_url)
    if a.flavour == "dedicated":
        return cl.dedicated.completions.complete(dedicated_completions_body=body, x_friendli_team=team)
    return cl.serverless.completions.complete(serverless_completions_body=body, x_friendli_team=team)


def chat_call(cl, stream):
    ns = {"container": cl.container, "dedicated": cl.dedicated}.get(a.flavour, cl.serverless)
    kwargs = {"server_url": a.base_url} if a.flavour == "container" else {"x_friendli_team": a.team}
    return ns.chat.complete(model=a.model, messages=c.MESSAGES, max_tokens=5, stream=stream, **kwargs)


BODY = {"model": a.model, "prompt": c.PROMPT, "max_tokens": 5}


def complete():
    r = call(client(), {**BODY, "stream": False})
    ch = r.choices[0]
    assert isinstance(ch.seed, int) and isinstance(ch.tokens, list)
    c.emit(True, ch.text, ch.finish_reason, c.dump(r.usage))


def stream():
    text, finish, usage, n = "", None, None, 0
    for event in call(client(), {**BODY, "stream": True, "stream_options": {"include_usage": True}}):
        n += 1
        data = event.data
        for ch in data.choices:
            text += ch.text
            finish = ch.finish_reason if ch.finish_reason not in (None, "null") else finish
        usage = c.dump(data.usage) if data.usage else usage
    c.emit(True, text, finish, usage, chunks=n)


def chat():
    r = chat_call(client(), False)
    c.emit(True, r.choices[0].message.content, r.choices[0].finish_reason, c.dump(r.usage))


def chat_stream():
    text, finish, n = "", None, 0
    for event in chat_call(client(), True):
        n += 1
        for ch in event.data.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    c.emit(True, text, finish, chunks=n)


def bad_key():
    call(client(key="wrong-key"), {**BODY, "stream": False})


def wrong_team():
    call(client(), {**BODY, "stream": False}, team="team2")


def malformed():
    call(client(malformed=True), {**BODY, "stream": False})


cases = dict(complete=complete, stream=stream, chat=chat, chat_stream=chat_stream, bad_key=bad_key, malformed=malformed)
if a.flavour != "container":
    cases["wrong_team"] = wrong_team
c.run(cases, a.case, lambda e: getattr(e, "status_code", None))

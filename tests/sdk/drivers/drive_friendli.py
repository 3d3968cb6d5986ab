"""Driver for the friendli SDK 0.16 (Speakeasy, the current FriendliAI client), in three flavours:

* ``serverless``: ``f.serverless.*`` → /serverless/v1/completions, /serverless/v1/chat/completions
* ``dedicated``:  ``f.dedicated.*``  → /dedicated/v1/... (``model`` is the endpoint id)
* ``container``:  ``f.container.*``  → /v1/... (self-hosted engine; no team header exists there)

Quirks handled here (clients.md §3): the team header is sent only when ``x_friendli_team=`` is given
to each call; retries are turned off with ``RetryConfig("none", None, False)``; the body is validated
before sending, so the malformed case rewrites the JSON in a custom httpx transport. Also: container
operations ignore the client's ``server_url`` (each has its own default, http://localhost:8000), so
``server_url=`` is passed per call there. Completions carry a fixed ``seed``: Friendli chooses a random
one when none is given, so an unseeded stream and whole answer would differ.
Run with .sdk-venvs/friendli/bin/python; prints one JSON line (see _common.py).
"""

import json

import _common as c
import httpx
from friendli import SyncFriendli
from friendli.core.models import SDKError
from friendli.core.utils.retries import RetryConfig

a = c.parse_args(flavours=("serverless", "dedicated", "container"))


class Malform(httpx.HTTPTransport):
    """Rewrites the already validated JSON body on its way out, giving it a wrong-typed field."""

    def handle_request(self, request):
        body = {**json.loads(request.content), **c.MALFORMED}
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
        request = httpx.Request(request.method, request.url, headers=headers, content=json.dumps(body).encode())
        return super().handle_request(request)


def client(key=a.key, malformed=False):
    http = httpx.Client(transport=Malform(), timeout=30) if malformed else None
    # x_friendli_team here only silences the SDK's "not provided" warning; requests never read it
    return SyncFriendli(
        token=key,
        server_url=a.base_url,
        retry_config=RetryConfig("none", None, False),
        client=http,
        timeout_ms=30000,
        x_friendli_team=a.team,
    )


def team_kwargs():
    if a.flavour == "container":
        return {"server_url": a.base_url}
    return {"x_friendli_team": a.team} if a.team else {}


def completions(f, body):
    if a.flavour == "container":
        return f.container.completions.complete(request=body, **team_kwargs())
    if a.flavour == "dedicated":
        return f.dedicated.completions.complete(dedicated_completions_body=body, **team_kwargs())
    return f.serverless.completions.complete(serverless_completions_body=body, **team_kwargs())


def chats(f, stream):
    ns = getattr(f, a.flavour)
    kwargs = {"stream_options": {"include_usage": True}} if stream else {}
    return ns.chat.complete(
        model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS, stream=stream, **kwargs, **team_kwargs()
    )


# Friendli picks a random seed when none is given (and reports it), so the completion cases fix one:
# otherwise the streamed and the whole answer would differ.
BODY = {"model": a.model, "prompt": c.PROMPT, "max_tokens": c.MAX_TOKENS, "seed": c.SEED}


def complete(key=a.key, malformed=False):
    r = completions(client(key, malformed), {**BODY, "stream": False})
    ch = r.choices[0]
    return c.result(ch.text, ch.finish_reason, r.usage)


def stream():
    acc = c.Collect()
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    for event in completions(client(), body):
        acc.chunks += 1
        for ch in event.data.choices:
            acc.add(ch.text, ch.finish_reason)
        acc.add(usage=event.data.usage)
    return acc.result()


def chat():
    r = chats(client(), False)
    ch = r.choices[0]
    return c.result(ch.message.content, ch.finish_reason, r.usage)


def chat_stream():
    acc = c.Collect()
    for event in chats(client(), True):
        acc.chunks += 1
        for ch in event.data.choices:
            acc.add(None if c.absent(ch.delta.content) else ch.delta.content, ch.finish_reason)
        acc.add(usage=event.data.usage)
    return acc.result()


cases = {
    "complete": complete,
    "stream": stream,
    "chat": chat,
    "chat_stream": chat_stream,
    "bad_key": lambda: complete(key=c.WRONG_KEY),
    "malformed": lambda: complete(malformed=True),
}
if a.flavour != "container":  # container operations have no x_friendli_team parameter
    cases["wrong_team"] = complete
c.main(a, cases, lambda exc: exc.status_code if isinstance(exc, SDKError) else None)

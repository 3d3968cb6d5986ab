"""Driver for the openai SDK's request fields: which fields each request API's create params have (its
``TypedDict``s, as its type checkers and its users see them), and what the gateway answers when the SDK
sends one the gateway refuses. Run with .sdk-venvs/openai/bin/python; retries off. Prints one JSON
object: ``version``; ``fields``, API -> its fields; ``refused``, API -> field -> ``{"ok": true, ...}`` or
``{"ok": false, "error": <exception class>, "status": ..., "body": <the error object>}``.
"""

import argparse
import json
import sys

import openai
from openai.types import completion_create_params, embedding_create_params
from openai.types.chat import completion_create_params as chat_create_params
from openai.types.responses import response_create_params

import _common as c

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--key", required=True)
p.add_argument("--model", required=True)
p.add_argument("--refuse", default="[]", help='JSON: [[api, field, value], ...], each sent by the SDK as a keyword')
a = p.parse_args()


def fields(*params):
    return sorted(set().union(*(t.__required_keys__ | t.__optional_keys__ for t in params)))


FIELDS = {
    "chat": fields(chat_create_params.CompletionCreateParamsBase, chat_create_params.CompletionCreateParamsStreaming),
    "completions": fields(completion_create_params.CompletionCreateParamsBase,
                          completion_create_params.CompletionCreateParamsStreaming),
    "embeddings": fields(embedding_create_params.EmbeddingCreateParams),
    "responses": fields(response_create_params.ResponseCreateParamsBase,
                        response_create_params.ResponseCreateParamsStreaming),
}

client = openai.OpenAI(api_key=a.key, base_url=a.base_url.rstrip("/") + "/v1", max_retries=0, timeout=30)
CALLS = {
    "chat": lambda **kw: client.chat.completions.create(model=a.model, messages=c.MESSAGES, max_tokens=c.MAX_TOKENS,
                                                         **kw),
    "completions": lambda **kw: client.completions.create(model=a.model, prompt=c.PROMPT, max_tokens=c.MAX_TOKENS,
                                                          **kw),
    "embeddings": lambda **kw: client.embeddings.create(model=a.model, input=c.PROMPT, **kw),
    "responses": lambda **kw: client.responses.create(model=a.model, input=c.PROMPT, **kw),
}


def sent(api, field, value):
    return lambda: {"answer": CALLS[api](**{field: value}).model_dump()}


out = sys.stdout
sys.stdout = sys.stderr
refused = {}
for api, field, value in json.loads(a.refuse):
    refused.setdefault(api, {})[field] = c.attempt(sent(api, field, value))
sys.stdout = out
print(json.dumps({"version": openai.__version__, "fields": FIELDS, "refused": refused}, default=str), flush=True)

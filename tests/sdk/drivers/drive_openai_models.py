"""Driver for the openai SDK's models API (``models.list``, ``models.retrieve``) on every base the gateway
lists models under: ``OpenAI(base_url=<gw><base>)``. Retries off. Run with .sdk-venvs/openai/bin/python;
prints one JSON object, base → case → ``{"ok": true, ...}`` or ``{"ok": false, "error": <exception
class>, "status": ..., "body": <the error object>}``.
"""

import argparse
import json
import sys

import openai

import _common as c

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--key", required=True)
p.add_argument("--model", required=True)
p.add_argument("--alias", required=True, help="a model id with a slash in it")
p.add_argument("--base", action="append", required=True, help="a path the gateway lists models under")
a = p.parse_args()


def cases(base):
    client = openai.OpenAI(api_key=a.key, base_url=a.base_url.rstrip("/") + base, max_retries=0, timeout=30)
    return {
        "list": lambda: {"ids": [m.id for m in client.models.list()]},
        "retrieve": lambda: client.models.retrieve(a.model).model_dump(),
        "retrieve_alias": lambda: client.models.retrieve(a.alias).model_dump(),  # sent as meta%2Ftiny
        "retrieve_missing": lambda: client.models.retrieve("no-such-model").model_dump(),
    }


run = c.attempt


out = sys.stdout
sys.stdout = sys.stderr
results = {base: {name: run(fn) for name, fn in cases(base).items()} for base in a.base}
sys.stdout = out
print(json.dumps(results, default=str), flush=True)

"""Driver for the openai SDK's Responses API, unchanged but for base URL and key, against a gateway
whose model is an OpenAI target's own /v1/responses (the wire fake, ``--kind openai``): a hosted
tool's item and its typed stream events as the SDK parses them, the SDK's accumulating stream
helper over relayed events, a function-call round trip, a chain on OpenAI's own state, another
team's id answered 404. Prints one JSON line: ``{"ok": ..., "passed": [...], "failed": {...}}``.
Run with .sdk-venvs/openai/bin/python.
"""

import argparse
import json
import traceback

import openai

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--key", required=True)
p.add_argument("--other-key", required=True, help="a key of another team")
p.add_argument("--model", required=True)
a = p.parse_args()


def client(key=a.key):
    return openai.OpenAI(api_key=key, base_url=a.base_url.rstrip("/") + "/v1", max_retries=0, timeout=30)


gw = client()
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
checks = {}


def check(fn):
    checks[fn.__name__] = fn
    return fn


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


@check
def hosted_tool_whole():
    r = gw.responses.create(model=a.model, input="tides at Brest", tools=[{"type": "web_search"}], max_output_tokens=5)
    kinds = [item.type for item in r.output]
    expect(kinds == ["web_search_call", "message"], kinds)
    expect(r.output[0].action.type == "search", r.output[0])  # the SDK's own type for the item
    expect(r.output_text and r.usage.output_tokens > 0, r)


@check
def hosted_tool_streamed():
    with gw.responses.stream(model=a.model, input="tides", tools=[{"type": "web_search"}]) as s:
        events = list(s)
        final = s.get_final_response()
    types = [e.type for e in events]
    expect("response.web_search_call.searching" in types, types)
    expect([e.sequence_number for e in events] == list(range(len(events))), "sequence numbers")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    expect(deltas == final.output_text and final.output[0].type == "web_search_call", (deltas, final))


@check
def function_call_round_trip():
    first = gw.responses.create(model=a.model, input="Weather in Paris?", tools=[TOOL])
    (call,) = first.output
    expect(call.type == "function_call" and call.name == "get_weather", call)
    expect(set(json.loads(call.arguments)) == {"city"}, call.arguments)
    second = gw.responses.create(
        model=a.model,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[TOOL],
        max_output_tokens=5,
    )
    expect(second.output[0].type == "message" and second.output_text, second)
    expect(second.previous_response_id == first.id, second.previous_response_id)  # OpenAI's echo


@check
def chain_and_retrieve():
    one = gw.responses.create(model=a.model, input="first turn", max_output_tokens=3)
    two = gw.responses.create(model=a.model, input="second", previous_response_id=one.id, max_output_tokens=3)
    got = gw.responses.retrieve(two.id)
    expect(got.id == two.id and got.output_text == two.output_text, got)


@check
def other_team_404():
    one = gw.responses.create(model=a.model, input="mine", max_output_tokens=3)
    other = client(a.other_key)
    try:
        other.responses.create(model=a.model, input="x", previous_response_id=one.id)
    except openai.NotFoundError:
        return
    raise AssertionError("another team chained on this team's response")


passed, failed = [], {}
for name, fn in checks.items():
    try:
        fn()
        passed.append(name)
    except Exception as exc:  # noqa: BLE001
        failed[name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
print(json.dumps({"ok": not failed, "passed": passed, "failed": failed}))

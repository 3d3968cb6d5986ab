"""Driver for the openai SDK's Responses and embeddings APIs, unchanged but for base URL and key,
against a gateway in front of the scripted upstream (tests/fakes/scripted.py). Runs every check in
one process and prints one JSON line: ``{"ok": ..., "passed": [...], "failed": {name: why}}``.
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
p.add_argument("--embed-model", required=True)
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


def status_of(call):
    try:
        call()
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


@check
def whole():
    r = gw.responses.create(model=a.model, input="Hello gateway", instructions="be brief")
    expect(r.output_text == "echo: Hello gateway", r.output_text)
    expect(r.status == "completed" and r.usage.input_tokens > 0 and r.usage.output_tokens == 3, r.usage)
    expect(r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, r.usage)
    expect(r.instructions == "be brief", r.instructions)


@check
def incomplete():
    r = gw.responses.create(model=a.model, input="one two three four", max_output_tokens=2)
    expect(r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r.incomplete_details)
    expect(r.output_text == "echo: one", r.output_text)


@check
def streamed_events():
    events = list(gw.responses.create(model=a.model, input="Hello gateway", stream=True))
    types = [e.type for e in events]
    expect(types[:2] == ["response.created", "response.in_progress"], types)
    expect(types[-1] == "response.completed", types)
    expect([e.sequence_number for e in events] == list(range(len(events))), "sequence numbers")
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    expect(len(deltas) >= 2 and "".join(deltas) == "echo: Hello gateway", deltas)
    expect(events[-1].response.output_text == "echo: Hello gateway", events[-1].response)


@check
def stream_helper():
    # the SDK's accumulating helper checks every event against the response it builds
    with gw.responses.stream(model=a.model, input="Hello gateway") as s:
        texts = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()
    expect("".join(texts) == final.output_text == "echo: Hello gateway", final.output_text)


@check
def function_call_round_trip():
    first = gw.responses.create(model=a.model, input="Weather in Paris? [[tool:get_weather]]", tools=[TOOL])
    (call,) = first.output
    expect(call.type == "function_call" and call.name == "get_weather", call)
    expect(json.loads(call.arguments) == {"city": "Paris"}, call.arguments)
    second = gw.responses.create(
        model=a.model,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[TOOL],
    )
    expect(second.output_text == "the tool said: sunny", second.output_text)


@check
def function_call_streamed():
    with gw.responses.stream(model=a.model, input="Weather? [[tool:get_weather]]", tools=[TOOL]) as s:
        deltas = [e.delta for e in s if e.type == "response.function_call_arguments.delta"]
        final = s.get_final_response()
    (call,) = final.output
    expect(call.type == "function_call" and "".join(deltas) == call.arguments, (deltas, call))
    # the whole conversation, sent again by the client (no stored state used)
    items = [
        {"role": "user", "content": "Weather? [[tool:get_weather]]"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "rain"},
    ]
    r = gw.responses.create(model=a.model, input=items, tools=[TOOL], store=False)
    expect(r.output_text == "the tool said: rain", r.output_text)


@check
def chain_retrieve_input_items_delete():
    one = gw.responses.create(model=a.model, input="first turn")
    two = gw.responses.create(model=a.model, input="how many? [[count]]", previous_response_id=one.id)
    expect(two.output_text == "messages: 3", two.output_text)  # user, assistant, user
    got = gw.responses.retrieve(two.id)
    expect(got.id == two.id and got.output_text == two.output_text, got)
    items = gw.responses.input_items.list(two.id)
    texts = [part.text for item in items.data for part in item.content]
    expect(texts == ["how many? [[count]]"], texts)
    gw.responses.delete(two.id)
    expect(status_of(lambda: gw.responses.retrieve(two.id)) == 404, "deleted, yet found")


@check
def store_false():
    r = gw.responses.create(model=a.model, input="Hello", store=False)
    expect(r.store is False, r.store)
    expect(status_of(lambda: gw.responses.retrieve(r.id)) == 404, "store: false, yet found")


@check
def other_team_404():
    r = gw.responses.create(model=a.model, input="Hello")
    other = client(a.other_key)
    expect(status_of(lambda: other.responses.retrieve(r.id)) == 404, "another team saw it")
    expect(status_of(lambda: other.responses.input_items.list(r.id)) == 404, "another team listed it")
    chained = lambda: other.responses.create(model=a.model, input="x", previous_response_id=r.id)  # noqa: E731
    expect(status_of(chained) == 404, "another team chained it")
    expect(gw.responses.retrieve(r.id).id == r.id, "its own team lost it")


@check
def embeddings_strings():
    r = gw.embeddings.create(model=a.embed_model, input=["first", "second"])  # the SDK asks for base64
    expect(len(r.data) == 2 and all(len(d.embedding) == 8 for d in r.data), r.data)
    expect(r.data[0].embedding != r.data[1].embedding and r.usage.prompt_tokens == 2, r.usage)


@check
def embeddings_token_ids():
    r = gw.embeddings.create(model=a.embed_model, input=[[1, 2, 3], [4, 5]], encoding_format="float")
    expect([d.index for d in r.data] == [0, 1] and r.usage.prompt_tokens == 5, r)


@check
def embeddings_base64_dimensions():
    floats = gw.embeddings.create(model=a.embed_model, input="x", encoding_format="float", dimensions=4)
    expect(len(floats.data[0].embedding) == 4, floats.data[0].embedding)
    b64 = gw.embeddings.create(model=a.embed_model, input="x", encoding_format="base64", dimensions=4)
    expect(isinstance(b64.data[0].embedding, str), type(b64.data[0].embedding))
    decoded = gw.embeddings.create(model=a.embed_model, input="x", dimensions=4)  # base64, decoded by the SDK
    expect([round(v, 5) for v in decoded.data[0].embedding] == [round(v, 5) for v in floats.data[0].embedding],
           (decoded.data[0].embedding, floats.data[0].embedding))


passed, failed = [], {}
for name, fn in checks.items():
    try:
        fn()
        passed.append(name)
    except Exception as exc:  # noqa: BLE001
        failed[name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
print(json.dumps({"ok": not failed, "passed": passed, "failed": failed}))

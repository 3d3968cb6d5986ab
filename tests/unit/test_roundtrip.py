"""parse ∘ encode is the identity on the OpenAI/vLLM codec's supported subset, both ways: what the
gateway sends an OpenAI-compatible upstream is what an OpenAI client would have had to send."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters import PROVIDERS
from gateway.core.request import Operation
from gateway.core.response import Accumulator, Choice, Completion, Usage
from gateway.dialects import DIALECTS, OPENAI
from gateway.dialects.openai import egress
from gateway.dialects.openai.render import OPENAI_STYLE, render

words = st.text(alphabet="abc xyz", min_size=1, max_size=6)
optional = {
    "max_tokens": st.integers(1, 4096),
    "temperature": st.floats(0, 2, allow_nan=False),
    "top_p": st.floats(0, 1, allow_nan=False),
    "n": st.integers(1, 4),
    "stop": st.lists(words, min_size=1, max_size=4),
    "presence_penalty": st.floats(-2, 2, allow_nan=False),
    "frequency_penalty": st.floats(-2, 2, allow_nan=False),
    "logprobs": st.integers(0, 5),
    "echo": st.just(True),
    "seed": st.integers(0, 2**31),
    "user": words,
    "top_k": st.integers(1, 100),
    "min_p": st.floats(0.01, 1, allow_nan=False),
    "repetition_penalty": st.floats(0.5, 2, allow_nan=False),
    "min_tokens": st.integers(1, 10),
    "stop_token_ids": st.lists(st.integers(0, 1000), min_size=1, max_size=3),
    "bad_words": st.lists(words, min_size=1, max_size=3),
    "ignore_eos": st.just(True),
    "logit_bias": st.dictionaries(st.integers(0, 999).map(str), st.floats(-100, 100, allow_nan=False), min_size=1),
}


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "prompt": draw(st.one_of(words, st.lists(words, min_size=1, max_size=3)))}
    for key in draw(st.sets(st.sampled_from(sorted(optional)))):
        body[key] = draw(optional[key])
    return body


@settings(max_examples=300)
@given(bodies())
def test_parse_encode_is_identity(body: dict[str, Any]) -> None:
    req = OPENAI.parse(Operation.COMPLETION, body, "")
    again = OPENAI.parse(Operation.COMPLETION, egress.encode(req, "m"), "")
    assert again == req


@settings(max_examples=100)
@given(st.lists(st.tuples(words, st.sampled_from(["stop", "length"])), min_size=1, max_size=3))
def test_render_decode_is_identity(choices: list[tuple[str, str]]) -> None:
    req = OPENAI.parse(Operation.COMPLETION, {"model": "m", "prompt": "p"}, "")
    acc = Accumulator()
    completion = Completion("id", 1, "m", [], None)
    for i, (text, reason) in enumerate(choices):
        acc.choices[i] = egress.decode(
            {"choices": [{"index": i, "text": text, "finish_reason": reason}]}, Operation.COMPLETION
        ).choices[0]
    completion.choices = acc.completion().choices
    body = render(OPENAI_STYLE, req, completion)
    decoded = egress.decode(body, Operation.COMPLETION)
    assert [(c.index, c.text, c.finish_reason) for c in decoded.choices] == [
        (i, t, r) for i, (t, r) in enumerate(choices)
    ]


# Each vendor's codec both ways: what the gateway renders for a client of that vendor reads back, through
# the same vendor's egress decoder, as the answer it started from (the supported subset: text, finish
# reason within the vendor's vocabulary, index, usage).
VENDOR_CODECS = {
    "openai": ("openai", "openai"),
    "friendli": ("friendli", "friendli"),
    "sgp": ("sgp5", "sgp"),
    "octoai": ("octoai", "octoai"),
}


@settings(max_examples=60)
@given(
    st.sampled_from(sorted(VENDOR_CODECS)),
    st.lists(st.tuples(words, st.sampled_from(["stop", "length"])), min_size=1, max_size=3),
    st.integers(0, 1000),
    st.integers(0, 1000),
)
def test_each_vendor_codec_round_trips(vendor: str, choices: list[tuple[str, str]], prompt: int, out: int) -> None:
    dialect_name, provider = VENDOR_CODECS[vendor]
    dialect, wire = DIALECTS[dialect_name], PROVIDERS[provider]
    req = dialect.parse(Operation.COMPLETION, {"model": "m", "prompt": "p"}, "serverless")
    completion = Completion(
        "id", 1, "m", [Choice(i, t, r, seed=7, token_ids=[]) for i, (t, r) in enumerate(choices)], Usage(prompt, out)
    )
    decoded = wire.decode(dialect.render(req, completion), req)
    assert [(c.index, c.text, c.finish_reason) for c in decoded.choices] == [
        (i, t, r) for i, (t, r) in enumerate(choices)
    ]
    assert decoded.usage is not None and (decoded.usage.prompt_tokens, decoded.usage.completion_tokens) == (prompt, out)

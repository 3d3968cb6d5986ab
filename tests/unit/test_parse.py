"""Each dialect's fields land on the internal request, or are refused naming the field."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.core import caps
from gateway.core.errors import InvalidRequest, PayloadTooLarge
from gateway.core.request import Feature, Operation, StructuredOutput
from gateway.dialects import FRIENDLI, FRIENDLI_2024, OCTOAI, OPENAI, SGP_V4, SGP_V5
from gateway.dialects.base import Dialect
from gateway.dialects.common import loads
from gateway.dialects.friendli import parse as friendli_parse
from gateway.dialects.friendli.schema import FriendliChatBody, FriendliCompletionBody
from gateway.dialects.octoai import OctoChatBody, OctoExtras
from gateway.dialects.openai.schema import CompletionBody, OpenAIChatBody
from gateway.dialects.sgp import SGPChatBody, SGPCompletionBody

C, CHAT = Operation.COMPLETION, Operation.CHAT


def parse(d: Dialect, body: dict[str, Any], op: Operation = C, flavour: str = "serverless") -> Any:
    return d.parse(op, body, flavour)


def refused(d: Dialect, body: dict[str, Any], op: Operation = C, flavour: str = "serverless") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        d.parse(op, body, flavour)
    return info.value


def test_openai_completion_fields() -> None:
    r = parse(
        OPENAI,
        {
            "model": "m",
            "prompt": ["a", "b"],
            "max_tokens": 7,
            "temperature": 0.5,
            "top_p": 0.9,
            "n": 2,
            "stop": "x",
            "logprobs": 3,
            "echo": True,
            "seed": 4,
            "logit_bias": {"50256": -100},
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "u",
            "top_k": 5,
            "structured_outputs": {"regex": "[0-9]+"},
        },
    )
    s = r.sampling
    assert r.prompts == ("a", "b") and r.stream and r.stream_usage and r.user == "u"
    assert (s.max_tokens, s.temperature, s.top_p, s.n, s.stop) == (7, 0.5, 0.9, 2, ("x",))
    assert (s.logprobs, s.echo, s.seeds, s.logit_bias, s.top_k) == (3, True, (4,), {50256: -100}, 5)
    assert s.structured == StructuredOutput("regex", "[0-9]+")
    assert {Feature.BATCH_PROMPT, Feature.N, Feature.TOP_K, Feature.REGEX, Feature.LOGIT_BIAS} <= r.features


def test_openai_token_prompts() -> None:
    r = parse(OPENAI, {"model": "m", "prompt": [[1, 2], [3]]})
    assert r.prompts == ((1, 2), (3,)) and Feature.TOKEN_PROMPT in r.features


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": "x", "max_tokens": "many"}, "max_tokens"),
        ({"model": "m", "prompt": "x", "temperature": 3}, "temperature"),
        ({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "m", "prompt": "x", "wat": 1}, "wat"),
        ({"model": "m", "prompt": "x", "n": 3, "best_of": 2}, "best_of"),
        ({"model": "m", "prompt": "x", "best_of": 3, "stream": True}, "best_of"),
        ({"model": "m", "prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "m", "prompt": []}, "prompt"),
    ],
)
def test_openai_refusals_name_the_field(body: dict[str, Any], param: str) -> None:
    assert refused(OPENAI, body).param == param


def test_openai_chat() -> None:
    r = parse(
        OPENAI,
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 9,
            "logprobs": True,
            "top_logprobs": 2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
            "store": True,
        },
        CHAT,
    )
    assert r.messages[0].content == "hi" and r.sampling.max_tokens == 9 and r.sampling.logprobs == 2
    assert r.sampling.structured == StructuredOutput("json_schema", {"type": "object"})
    assert r.extra_body == {"store": True} and r.field_name(Feature.EXTRA_BODY) == "store"
    assert (
        refused(
            OPENAI,
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "max_completion_tokens": 2},
            CHAT,
        ).param
        == "max_completion_tokens"
    )


def test_friendli_current_fields() -> None:
    r = parse(
        FRIENDLI,
        {
            "model": "m",
            "tokens": [1, 2, 3],
            "max_total_tokens": 50,
            "min_total_tokens": 10,
            "top_k": 0,
            "min_p": 0.1,
            "xtc_threshold": 0.2,
            "xtc_probability": 0.5,
            "seed": [1, 2],
            "stop_tokens": [{"tokens": [7]}],
            "eos_token": [9],
            "bad_words": ["foo"],
            "no_repeat_ngram": 3,
            "forced_output_tokens": [4, 5],
            "response_format": {"type": "regex", "schema": "(yes|no)"},
            "stream": False,
        },
    )
    s = r.sampling
    assert r.prompts == ((1, 2, 3),) and s.top_k is None and s.min_p == 0.1
    assert (s.max_total_tokens, s.min_total_tokens, s.n, s.seeds) == (50, 10, 2, (1, 2))
    assert s.stop_token_sequences == ((7,),) and s.eos_token_ids == (9,) and s.no_repeat_ngram == 3
    assert s.structured == StructuredOutput("regex", "(yes|no)")
    assert {Feature.XTC, Feature.SEED_PER_CHOICE, Feature.MAX_TOTAL_TOKENS, Feature.FORCED_OUTPUT} <= r.features
    assert r.field_name(Feature.SEED_PER_CHOICE) == "seed" and r.want_seed and r.want_token_ids


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "prompt": "x", "max_tokens": 5, "max_total_tokens": 9}, "max_total_tokens"),
        ({"model": "m", "prompt": "x", "min_tokens": 5, "min_total_tokens": 9}, "min_total_tokens"),
        ({"model": "m", "prompt": "x", "min_tokens": 2, "response_format": {"type": "json_object"}}, "min_tokens"),
        ({"model": "m", "prompt": "x", "seed": [1, 2], "n": 3}, "seed"),
        ({"model": "m", "prompt": "x", "stop": "bare"}, "stop"),
        ({"model": "m", "prompt": "x", "tokens": [1]}, "tokens"),
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": "x", "top_p": 0}, "top_p"),
        ({"model": "m", "prompt": "x", "token_index_to_replace": [1]}, "embedding_to_replace"),
    ],
)
def test_friendli_cross_field_rules(body: dict[str, Any], param: str) -> None:
    assert refused(FRIENDLI, body).param == param


def test_friendli_2024_beam_rules_and_schema_string() -> None:
    base = {"model": "m", "prompt": "x", "timeout_microseconds": None, "num_beams": None}
    assert FRIENDLI.select(base, {}) is FRIENDLI_2024
    r = parse(
        FRIENDLI_2024,
        {
            **base,
            "response_format": {"type": "json_object", "schema": '{"type":"object"}'},
            "timeout_microseconds": 2_000_000,
            "include_output_logprobs": True,
        },
    )
    assert r.sampling.structured == StructuredOutput("json_schema", {"type": "object"})
    assert r.timeout == 2.0 and r.sampling.logprobs == 0
    assert refused(FRIENDLI_2024, {**base, "num_beams": 4, "stream": True}).param == "stream"
    assert refused(FRIENDLI_2024, {**base, "num_beams": 4, "top_k": 3}).param == "top_k"
    assert refused(FRIENDLI_2024, {**base, "length_penalty": 1.2}).param == "length_penalty"
    assert refused(FRIENDLI_2024, {**base, "response_format": {"type": "json_object", "schema": "{"}}).param
    beams = parse(FRIENDLI_2024, {**base, "num_beams": 4, "beam_search_type": "STOCHASTIC", "top_k": 3})
    assert beams.sampling.beam is not None and Feature.BEAM_SEARCH in beams.features


def test_friendli_dedicated_adapter_and_container_model() -> None:
    r = parse(FRIENDLI, {"model": "ep1:lora", "prompt": "x"}, flavour="dedicated")
    assert (r.model, r.adapter) == ("ep1", "lora") and Feature.ADAPTER in r.features
    assert parse(FRIENDLI, {"model": "a:b", "prompt": "x"}).model == "a:b"


@pytest.mark.parametrize("model", [":lora", "ep1:", ":"])
@pytest.mark.parametrize("op", [C, Operation.CHAT])
def test_friendli_dedicated_model_needs_both_halves(model: str, op: Operation) -> None:
    """An empty endpoint fell through to the gateway's default model (a Friendli container's), with
    the adapter put on whatever that model's target is; an empty adapter went out unchanged, unserved."""
    body: dict[str, Any] = {"model": model}
    body |= {"messages": [{"role": "user", "content": "x"}]} if op is Operation.CHAT else {"prompt": "x"}
    with pytest.raises(InvalidRequest) as err:
        parse(FRIENDLI, body, op, flavour="dedicated")
    assert err.value.param == "model" and "ENDPOINT_ID:ADAPTER_ROUTE" in err.value.message


def test_sgp_synonyms_guided_and_timeout() -> None:
    r = parse(
        SGP_V4,
        {
            "model": "openai/m/dep",
            "prompt": "x",
            "max_new_tokens": 5,
            "max_tokens": 5,
            "stop_sequences": ["a"],
            "stop": "b",
            "logprobs": True,
            "top_logprobs": 3,
            "guided_choice": ["yes", "no"],
            "inference_timeout": "2.5",
            "top_k": -1,
        },
    )
    assert (r.sampling.max_tokens, r.sampling.stop, r.sampling.logprobs, r.timeout) == (5, ("b", "a"), 3, 2.5)
    assert r.sampling.structured == StructuredOutput("choice", ["yes", "no"]) and r.sampling.top_k is None
    assert (
        refused(SGP_V4, {"model": "m", "prompt": "x", "max_tokens": 5, "max_new_tokens": 6}).param == "max_new_tokens"
    )
    two = {"model": "m", "prompt": "x", "guided_regex": "a", "guided_json": {}}
    assert refused(SGP_V4, two).param == "guided_regex"
    bad_header = {"model": "m", "prompt": "x", "inference_extra_headers": {"Authorization": "x"}}
    assert refused(SGP_V4, bad_header).param == "inference_extra_headers"
    twice = {"model": "m", "prompt": "x", "inference_extra_headers": {"X-Route-Hint": "a", "x-route-hint": "b"}}
    err = refused(SGP_V4, twice)  # one header name, whatever its case: two values would both go upstream
    assert err.param == "inference_extra_headers" and "'x-route-hint' (named twice" in err.message
    assert parse(SGP_V5, {"model": "m", "prompt": ["a", "b"], "logprobs": 2}).sampling.logprobs == 2


def test_octoai_defaults_and_peft() -> None:
    r = parse(OCTOAI, {"model": "m", "prompt": "x", "peft": "lora1", "ignore_eos": True, "logit_bias": {"1": None}})
    assert r.sampling.max_tokens == 512 and r.adapter == "lora1" and r.sampling.ignore_eos
    assert r.sampling.logit_bias is None
    assert refused(OCTOAI, {"model": "m", "prompt": "x", "log_prompt": True}).param == "log_prompt"
    assert Feature.PROMPT_LOGPROBS in parse(OCTOAI, {"model": "m", "prompt": "x", "loglikelihood": True}).features


FUNCTION = {"name": "get_w", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(
    ("extra", "sent"),
    [
        ({"functions": None, "function_call": None}, {}),  # octoai-sdk 0.10 sends both, null
        ({"function_call": "auto"}, {}),  # no functions: nothing to call
        ({"functions": [FUNCTION]}, {"functions": [FUNCTION]}),
        (
            {"functions": [FUNCTION], "function_call": {"name": "get_w"}},
            {"functions": [FUNCTION], "function_call": {"name": "get_w"}},
        ),
    ],
)
def test_octoai_functions_go_by_name_never_dropped(extra: dict[str, Any], sent: dict[str, Any]) -> None:
    """OpenAI's deprecated function calling from an OctoAI client was marked a tool use and then
    dropped: a target with tools answered without ever seeing the functions. It travels as OpenAI
    clients' does: by name to targets that take platform fields, refused by name by the rest."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **extra}
    r = parse(OCTOAI, body, Operation.CHAT)
    assert dict(r.extra_body or {}) == sent
    assert r.features == ({Feature.EXTRA_BODY} if sent else set()), r.features
    assert not sent or r.field_name(Feature.EXTRA_BODY) == "functions"  # what a refusal names


@pytest.mark.parametrize(
    ("headers", "body", "name"),
    [
        ({}, {"model": "m", "prompt": "x"}, "openai"),
        ({"x-friendli-team": "t"}, {"model": "m", "prompt": "x"}, "friendli"),
        ({"user-agent": "speakeasy-sdk/python 0.16.3 friendli-core"}, {"model": "m", "prompt": "x"}, "friendli"),
        ({}, {"model": "m", "prompt": "x", "timeout_microseconds": None}, "friendli2024"),
        ({"x-fern-sdk-name": "octoai"}, {"model": "m", "prompt": "x"}, "octoai"),
        ({"user-agent": "octoai-0.10.1"}, {"model": "m", "prompt": "x"}, "octoai"),
        ({}, {"model": "m", "prompt": "x", "peft": "p"}, "octoai"),
    ],
)
def test_shared_v1_paths_select_the_dialect(headers: dict[str, str], body: dict[str, Any], name: str) -> None:
    assert OPENAI.select(body, headers).name == name


def test_explicit_nulls_mean_not_given() -> None:
    body = {
        "model": "m",
        "prompt": "x",
        "stream": False,
        **dict.fromkeys(
            [
                "tokens",
                "max_tokens",
                "max_total_tokens",
                "min_tokens",
                "min_total_tokens",
                "n",
                "num_beams",
                "length_penalty",
                "early_stopping",
                "no_repeat_ngram",
                "encoder_no_repeat_ngram",
                "repetition_penalty",
                "encoder_repetition_penalty",
                "frequency_penalty",
                "presence_penalty",
                "temperature",
                "top_k",
                "top_p",
                "stop",
                "stop_tokens",
                "seed",
                "token_index_to_replace",
                "embedding_to_replace",
                "beam_search_type",
                "beam_compat_pre_normalization",
                "beam_compat_no_post_normalization",
                "bad_words",
                "bad_word_tokens",
                "include_output_logits",
                "include_output_logprobs",
                "forced_output_tokens",
                "eos_token",
                "soft_prompts",
                "position_ids",
                "generation_offset",
                "timeout_microseconds",
            ]
        ),
    }
    r = parse(FRIENDLI_2024, body)
    assert r.features == frozenset() and r.sampling.n == 1


@pytest.mark.parametrize("operation", [Operation.COMPLETION, Operation.CHAT])
def test_a_body_without_vllm_sampling_fields_parses_as_one_that_names_them_null(operation: Operation) -> None:
    """The shortcut for bodies that name none of vLLM's sampling extensions gives what the full
    reading gives (a field sent as null takes the full reading)."""
    base: dict[str, Any] = {"model": "m", "max_tokens": 5}
    base |= {"prompt": "hi"} if operation is Operation.COMPLETION else {"messages": [{"role": "user", "content": "hi"}]}
    nulls = dict.fromkeys(["top_k", "min_p", "repetition_penalty", "min_tokens", "stop_token_ids", "bad_words"], None)
    nulls |= {"ignore_eos": None, "include_stop_str_in_output": None}
    assert OPENAI.parse(operation, base, "") == OPENAI.parse(operation, base | nulls, "")


def test_friendli_bodies_without_token_lists_or_lengths_parse_as_ones_naming_them_null(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(friendli_parse, "drawn_seed", lambda: (7,))  # each parse draws one otherwise
    base: dict[str, Any] = {"model": "m", "prompt": "hi", "max_tokens": 5}
    names = ["stop_tokens", "bad_word_tokens", "bad_words", "forced_output_tokens", "stop", "max_total_tokens"]
    names += ["min_total_tokens", "min_tokens", "no_repeat_ngram", "encoder_repetition_penalty"]
    nulls = dict.fromkeys([*names, "encoder_no_repeat_ngram"], None)
    assert FRIENDLI.parse(Operation.COMPLETION, base, "serverless") == FRIENDLI.parse(
        Operation.COMPLETION, base | nulls, "serverless"
    )


# --- caps (core/caps.py): every field of every dialect, the same bounds -----------------------------

BODIES: list[tuple[Dialect, Operation, type[BaseModel]]] = [
    (OPENAI, C, CompletionBody),
    (OPENAI, CHAT, OpenAIChatBody),
    (FRIENDLI, C, FriendliCompletionBody),
    (FRIENDLI, CHAT, FriendliChatBody),
    (SGP_V4, C, SGPCompletionBody),
    (SGP_V5, CHAT, SGPChatBody),
    (OCTOAI, C, OctoExtras),
    (OCTOAI, CHAT, OctoChatBody),
]
FIELDS = [
    (d, op, model.model_fields[name].alias or name)
    for d, op, model in BODIES
    for name in model.model_fields
    if name != "model"
]


def base(op: Operation) -> dict[str, Any]:
    if op is C:
        return {"model": "m", "prompt": "x"}
    return {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def dialect_id(case: Any) -> str:
    return case.name if hasattr(case, "name") else str(case)


@pytest.mark.parametrize(("d", "op", "field"), FIELDS, ids=dialect_id)
@pytest.mark.parametrize("value", [10**30, -(10**30), 1e308, -1e308, math.inf, math.nan])
def test_every_field_refuses_numbers_out_of_range_by_name(d: Dialect, op: Operation, field: str, value: Any) -> None:
    err = refused(d, base(op) | {field: value}, op)
    assert err.param is not None and err.param.startswith(field), (field, err)


@pytest.mark.parametrize(("d", "op", "field"), FIELDS, ids=dialect_id)
def test_every_list_field_has_a_cap(d: Dialect, op: Operation, field: str) -> None:
    cap = caps.LIST_CAPS.get(field, caps.MAX_ITEMS)
    err = refused(d, base(op) | {field: [1] * (cap + 1)}, op)
    assert err.param is not None and err.param.startswith(field), (field, err)


@pytest.mark.parametrize(("d", "op"), [(d, op) for d, op, _ in BODIES], ids=dialect_id)
def test_a_capitalised_unknown_field_keeps_its_name(d: Dialect, op: Operation) -> None:
    err = refused(d, base(op) | {"Temperature": 1}, op)
    assert (err.param, err.message) == ("Temperature", "unknown field 'Temperature'")


def test_union_tags_stay_out_of_the_field_name() -> None:
    assert refused(SGP_V4, {"model": "m", "prompt": "x", "logprobs": "many"}).param == "logprobs"
    assert refused(OPENAI, {"model": "m", "prompt": [[1], ["a"]]}).param == "prompt[1][0]"
    err = refused(
        FRIENDLI, {"model": "m", "prompt": "x", "stop_tokens": [{"tokens": [1]}, {"tokens": [1], "Tokens": [1]}]}
    )
    assert err.param == "stop_tokens[1].Tokens"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": [1, 2**31]}, "prompt[1]"),  # the id itself, as the message names it
        ({"prompt": [[1] * 20_000, [1] * 20_000]}, "prompt[1]"),
        ({"prompt": [True, False]}, "prompt[0]"),
        ({"prompt": "x", "logit_bias": {"-5": 1}}, "logit_bias"),
        ({"prompt": "x", "logit_bias": {str(2**31): 1}}, "logit_bias"),
        ({"prompt": "x", "extra": {"deep": [0.5, -math.inf]}}, "extra.deep[1]"),
        ({"prompt": ["x"] * 43, "n": 3}, "n"),
        ({"prompt": "x", "user": "u" * (caps.MAX_NAME + 1)}, "user"),
    ],
)
def test_token_ids_maps_and_choices_are_capped(body: dict[str, Any], param: str) -> None:
    assert refused(OPENAI, {"model": "m", **body}).param == param


def test_friendli_seed_lists_and_choices_are_capped() -> None:
    assert refused(FRIENDLI, {"model": "m", "prompt": "x", "seed": list(range(caps.MAX_CHOICES + 1))}).param == "seed"
    assert refused(FRIENDLI, {"model": "m", "prompt": "x", "n": 1_000_000}).param == "n"
    r = parse(FRIENDLI, {"model": "m", "prompt": "x", "seed": list(range(caps.MAX_CHOICES))})
    assert r.sampling.n == caps.MAX_CHOICES
    assert refused(SGP_V5, {"model": "m", "prompt": "x", "n": caps.MAX_CHOICES + 1}).param == "n"


def test_a_body_of_many_values_is_refused_before_parsing() -> None:
    many = b'{"prompt":[' + b",".join([b"1"] * caps.MAX_JSON_VALUES) + b"]}"
    with pytest.raises(PayloadTooLarge):
        loads(many)
    # a long text is one value, however many commas, brackets and escaped quotes it holds
    words = b"a, [b] {c} " * caps.MAX_JSON_VALUES + b'\\"d\\" \\\\ '
    text = b'{"prompt":"' + words + b'","n":1}'
    assert len(loads(text)["prompt"]) == len(words) - 3
    # ... but not where an escaped backslash ends it
    with pytest.raises(PayloadTooLarge):
        loads(b'{"prompt":"a\\\\",' + b"[1]," * caps.MAX_JSON_VALUES + b'"n":1}')
    small = b'{"prompt":[' + b",".join([b"1"] * (caps.UNCOUNTED_BODY // 2 - 8)) + b"]}"
    assert len(small) <= caps.UNCOUNTED_BODY and loads(small)  # too small to hold too many: not counted


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prompt_cache_retention", "24h"),
        ("prompt_cache_options", {"mode": "explicit", "ttl": "30m"}),
        ("moderation", {"model": "omni-moderation-latest"}),
    ],
)
def test_openai_platform_fields_of_newer_sdks_go_by_name(field: str, value: Any) -> None:
    """openai 3.57's chat fields for OpenAI's own prompt cache and moderation were refused on every
    target; like ``prompt_cache_key`` they go as they came to targets that take platform fields (an
    OpenAI target), and a target that does not is refused naming the field."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], field: value}
    r = parse(OPENAI, body, CHAT)
    assert dict(r.extra_body or {}) == {field: value}
    assert r.features == {Feature.EXTRA_BODY} and r.field_name(Feature.EXTRA_BODY) == field

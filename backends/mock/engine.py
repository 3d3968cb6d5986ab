"""The ``mock`` upstream: answers from ``text.py``, paced like a model server, in this process.

A stream sends one batch per step, one token of every unfinished choice (choice ``j`` of prompt ``i``
is index ``i * n + j``, as vLLM numbers them), ``1 / tokens_per_second`` apart; a chat answer opens
with a role delta per choice; usage closes every answer. A whole answer comes after the time its
longest choice would have taken to stream. Both are bounded by the request's deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from backends.mock import text, tools
from gateway.core.errors import GatewayError
from gateway.core.request import Feature, InternalRequest, Operation, PromptItem
from gateway.core.response import (
    Accumulator,
    Batch,
    Completion,
    Delta,
    Finish,
    StreamEvent,
    StreamStart,
    Then,
    Usage,
    UsageReport,
)
from gateway.core.upstream import Call, Identity
from gateway.runtime.config import ConfigError, Target

DEFAULT_TOKENS_PER_SECOND = 20.0  # slow enough to watch a stream arrive word by word
FEATURES = frozenset(
    {
        Feature.BATCH_PROMPT,
        Feature.TOKEN_PROMPT,
        Feature.N,
        Feature.STOP,
        Feature.INCLUDE_STOP_STR,
        Feature.IGNORE_EOS,
        Feature.MIN_TOKENS,
        Feature.SEED,
        Feature.SEED_PER_CHOICE,
        Feature.TOOLS,  # offered, answered in text; a forced or asked-for call made (``tools.py``)
        Feature.THINKING,  # enabled: a sentence of thinking first; adaptive: the mock chooses none
        Feature.EFFORT,  # a hint its fixed answers need not heed
        Feature.PREFILL,  # a conversation ending in the assistant's words: its answer goes on from them
        Feature.THOUGHTS,  # earlier turns' thinking sent back: part of the conversation it answers
    }
)
Sleep = Callable[[float], Awaitable[Any]]


def _settings(target: Target) -> float:
    args = dict(target.engine or {})
    rate = args.pop("tokens_per_second", DEFAULT_TOKENS_PER_SECOND)
    if args:
        raise ConfigError(
            f"provider 'mock': unknown engine argument(s) {', '.join(sorted(args))} (known: tokens_per_second)"
        )
    if not isinstance(rate, int | float) or isinstance(rate, bool) or rate < 0:
        raise ConfigError("provider 'mock': 'engine.tokens_per_second' must be a number >= 0 (0: no pacing)")
    return float(rate)


class MockEngine(Identity[Target]):
    def __init__(self, target: Target, public_model: str, sleep: Sleep = asyncio.sleep) -> None:
        self.identify(target, public_model)
        self._features = FEATURES
        self.tokens_per_second = _settings(target)
        self._sleep = sleep  # tests pass a recorder: pacing is counted, not timed

    async def start(self) -> None:
        """Nothing to start: the mock has no engine and no connection."""

    async def close(self) -> None:
        pass

    async def list_models(self) -> list[str]:
        return [self.model]

    # -- answering -------------------------------------------------------------------------------

    def _write(self, request: InternalRequest) -> tuple[list[text.Answer], Usage, tuple[GatewayError, int] | None]:
        """Every choice's answer, the usage they make and the error the prompt asked for, if any."""
        if request.operation is Operation.CHAT:
            keys = [text.prompt_key(request.messages)]
            prompt = text.chat_tokens(request.messages)
        else:
            prompts: tuple[PromptItem, ...] = request.prompts or ("",)
            keys = [text.prompt_key(p) for p in prompts]
            prompt = sum(text.prompt_tokens(p) for p in prompts)
        seeds = request.sampling.seeds
        n = request.sampling.n
        called = tools.call(request) if request.operation is Operation.CHAT else None
        answers = [
            text.calling(*called) if called else text.write(key, seeds[j % len(seeds)] if seeds else None, j, request)
            for key in keys
            for j in range(n)
        ]
        usage = Usage(
            prompt, sum(a.tokens for a in answers), reasoning_tokens=sum(len(a.thought) for a in answers) or None
        )
        asked = next((e for e in (text.asked_error(k, self.name) for k in keys) if e is not None), None)
        return answers, usage, asked

    def _start(self, request: InternalRequest, call: Call) -> StreamStart:
        prefix = "chatcmpl" if request.operation is Operation.CHAT else "cmpl"
        return StreamStart(
            f"{prefix}-mock-{call.request_id}", int(time.time()), call.model or self.model, token_ids=False
        )

    async def _pause(self, steps: int, call: Call) -> None:
        """Waits ``steps`` tokens' time; the request's deadline ends the wait with an error."""
        if not self.tokens_per_second or steps <= 0:
            return
        wanted = steps / self.tokens_per_second
        bound = call.hop(wanted)  # an expired deadline raises here
        await self._sleep(bound)
        if bound < wanted:
            raise call.timed_out(self.name, "answer not complete in time")

    async def complete(self, request: InternalRequest, call: Call) -> Completion:
        call.hop(0)  # an expired deadline is refused, paced or not, as by every upstream kind
        answers, usage, asked = self._write(request)
        if asked is not None:
            raise asked[0]
        await self._pause(max(a.tokens for a in answers), call)
        acc = Accumulator(start=self._start(request, call))
        chat = request.operation is Operation.CHAT
        for i, answer in enumerate(answers):
            thinking = "".join(answer.thought) or None
            acc.add(Delta(i, answer.text, role="assistant" if chat else None, reasoning=thinking))
            if answer.call is not None:
                acc.add(Delta(i, tool_calls=(_tool_call(answer.call, call, i),)))
            acc.add(Finish(i, answer.reason))
        acc.add(UsageReport(usage))
        return acc.completion()

    async def stream(self, request: InternalRequest, call: Call) -> AsyncIterator[Batch]:
        call.hop(0)  # an expired deadline is refused, paced or not, as by every upstream kind
        answers, usage, asked = self._write(request)
        fail_after = None
        if asked is not None:
            if asked[1] == 0:
                raise asked[0]  # before the first byte: the client gets an error status
            fail_after = asked[1]
        batch: list[StreamEvent] = [self._start(request, call)]
        if request.operation is Operation.CHAT:
            batch += [Delta(i, role="assistant") for i in range(len(answers))]
        steps = max(a.tokens for a in answers)
        for step in range(steps):
            if fail_after is not None and step == fail_after:
                assert asked is not None
                raise asked[0]  # after the first byte: the client's stream ends with it, in-band
            await self._pause(1, call)
            for i, answer in enumerate(answers):
                batch += _step(answer, step, i, call)
            if step < steps - 1:
                yield Batch(batch)
                batch = []
        if fail_after is not None:  # asked to fail after more tokens than the answer has: at its end
            assert asked is not None
            raise asked[0]
        yield Batch([*batch, UsageReport(usage)], Then.END)  # the answer ends in the same send


def _step(answer: text.Answer, step: int, i: int, call: Call) -> list[StreamEvent]:
    """Choice ``i``'s events at ``step``: a token of its thinking, then of its text; its tool call
    and its finish with its last token."""
    out: list[StreamEvent] = []
    thought = len(answer.thought)
    if step < thought:
        out.append(Delta(i, reasoning=answer.thought[step]))
    elif step - thought < len(answer.pieces) and answer.pieces[step - thought]:
        out.append(Delta(i, answer.pieces[step - thought]))
    if step == answer.tokens - 1:
        if answer.call is not None:
            out.append(Delta(i, tool_calls=(_tool_call(answer.call, call, i),)))
        out.append(Finish(i, answer.reason))
    return out


def _tool_call(made: tuple[str, str], call: Call, i: int) -> dict[str, Any]:
    """A tool call in OpenAI's shape (the events' own), its id unique to the request and choice."""
    name, arguments = made
    return {
        "index": 0,
        "id": f"call_mock_{call.request_id}_{i}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }

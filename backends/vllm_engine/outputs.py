"""vLLM's ``RequestOutput``s → our stream events, read the way the HTTP ``vllm`` provider reads the
JSON ``vllm serve`` makes of them (``gateway/dialects/openai/egress.py``, ``ChunkDecoder``).

Mirrored choices of vLLM's serving layer (``entrypoints/openai/*/serving.py``, 0.32) and of our
decoder: choice ``j`` of prompt ``i`` is index ``i * n + j``; output token ids ride on every delta
(the provider always asks ``return_token_ids``); a delta may carry ids with no text (BPE holds back
incomplete UTF-8); chat answers open with one role delta per choice; logprobs keep vLLM's shapes
(completions: the sampled token plus ``k`` alternatives; chat: the first ``k`` entries, bytes
included), floored at -9999; finish reasons go through the decoder's ``finish_from`` ("error" fails
the answer, "repetition" is a stop); usage is prompt lengths plus generated ids, less the end token
the ``stop_token_sequences`` plugin forces after a multi-token stop (``vllm_fields.forced_end``).

Echo writes the prompt text before the output, as OpenAI defines it; ``vllm serve`` drops that text
when ``return_token_ids`` is set (which the HTTP provider always sets), keeping only the prompt ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.vllm_engine.inputs import Job
from gateway.core.response import Delta, Finish, StreamEvent, TokenLogprob, Usage
from gateway.dialects.openai.chunks import finish_from
from gateway.dialects.openai.vllm_fields import forced_end

FLOOR = -9999.0  # vLLM's JSON-safe stand-in for -inf


class Reader:
    """Folds one job's outputs (``DELTA`` while streaming, ``FINAL_ONLY`` otherwise) into events."""

    __slots__ = ("echoed", "generated", "job", "prompted", "started", "tails", "tokenizer")

    def __init__(self, job: Job, tokenizer: Any) -> None:
        self.job = job
        self.tokenizer = tokenizer
        self.started = False
        self.echoed: set[int] = set()
        self.prompted: set[int] = set()
        self.generated = 0
        self.tails: dict[int, list[int]] = {}  # per choice, its last ids (multi-token stops only)

    def read(self, prompt_index: int, out: Any) -> list[StreamEvent]:
        job = self.job
        events: list[StreamEvent] = []
        if not self.started:
            self.started = True
            if job.chat:
                events += [Delta(i, role=job.role) for i in range(job.n)]
        for o in out.outputs:
            index = int(o.index) + prompt_index * job.n
            reason = finish_from(o.finish_reason)
            text: str = o.text or ""
            ids = list(o.token_ids)
            steps: list[Any] = list(o.logprobs or ()) if job.logprobs is not None else []
            if job.stops and ids:
                ids, steps = self.trim(index, ids, steps, reason)
            self.generated += len(ids)
            if job.echo and index not in self.echoed:
                self.echoed.add(index)
                prompt_ids = list(out.prompt_token_ids or ())
                text = (out.prompt if out.prompt is not None else self.tokenizer.decode(prompt_ids)) + text
                ids = prompt_ids + ids
                if job.logprobs is not None:
                    steps = list(out.prompt_logprobs or [None] * len(prompt_ids)) + steps
            lps = self.logprobs(ids, steps) if job.logprobs is not None else ()
            if job.prompt_logprobs and index not in self.prompted:
                self.prompted.add(index)
                lps = self.prompt_logprobs(out) + lps
            if text or ids or lps:
                events.append(Delta(index, text, tuple(ids), lps))
            if reason is not None:
                events.append(Finish(index, reason))
        return events

    def trim(self, index: int, ids: list[int], steps: list[Any], reason: str | None) -> tuple[list[int], list[Any]]:
        """One output's ids (and logprob steps) without the end token forced after a stop sequence."""
        seen = self.tails.get(index, []) + ids
        self.tails[index] = seen[-max(len(s) for s in self.job.stops) :]
        if reason == "stop" and forced_end(seen, self.job.stops):
            return ids[:-1], steps[: len(ids) - 1]
        return ids, steps

    def usage(self) -> Usage:
        return Usage(sum(self.job.prompt_lens), self.generated)

    def logprobs(self, ids: Sequence[int], steps: Sequence[Any]) -> tuple[TokenLogprob, ...]:
        k = self.job.logprobs
        out = []
        for i, tid in enumerate(ids):
            step: Any = steps[i] if i < len(steps) else None
            chosen = step.get(tid) if step else None
            if chosen is None:  # the prompt's first token, or an id vLLM gave no logprob for
                token = self.tokenizer.decode([tid])
                raw = tuple(token.encode("utf-8", "replace")) if self.job.chat else None
                out.append(TokenLogprob(token, FLOOR if self.job.chat else 0.0, (), raw))
                continue
            items = list(step.items())
            if self.job.chat:
                picked = items if k == -1 else items[: k or 0]
                top = tuple((self.token(lp, t), max(lp.logprob, FLOOR)) for t, lp in picked)
                decoded = chosen.decoded_token
                raw = None if decoded is None else tuple(decoded.encode("utf-8", "replace"))
            else:
                picked = items if k == -1 else items[: (k or 0) + 1]
                top = tuple({self.token(lp, t): max(lp.logprob, FLOOR) for t, lp in picked}.items())
                raw = None
            out.append(TokenLogprob(self.token(chosen, tid), max(chosen.logprob, FLOOR), top, raw))
        return tuple(out)

    def prompt_logprobs(self, out: Any) -> tuple[TokenLogprob, ...]:
        """The prompt tokens' own logprobs, the first excluded (nothing precedes it), as the HTTP
        provider reads vLLM's ``prompt_logprobs`` (``prompt_logprobs_from``)."""
        ids = list(out.prompt_token_ids or ())
        entries = []
        for tid, step in zip(ids, out.prompt_logprobs or (), strict=False):
            if step:
                own = step.get(tid) or next(iter(step.values()))
                entries.append(TokenLogprob(self.token(own, tid), max(own.logprob, FLOOR)))
        return tuple(entries)

    def token(self, logprob: Any, token_id: int) -> str:
        decoded = logprob.decoded_token
        return str(decoded) if decoded is not None else str(self.tokenizer.decode([token_id]))

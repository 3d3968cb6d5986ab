"""An OpenAI-shaped upstream stream's chunks → internal events (``ChunkDecoder``), and what a
relayed chunk's bytes are checked with: the keys the gateway must see decoded, and the shape a
model server's token events share, relayed as read. Read by the OpenAI, vLLM, Friendli, SGP and
OctoAI wires (``egress``) and Anthropic's chat relay; a whole answer's finish reasons too.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from typing import Any

from gateway.core.errors import UpstreamFailed, UpstreamMalformed
from gateway.core.request import Operation
from gateway.core.response import (
    FINISH_REASONS,
    Delta,
    Finish,
    FinishReason,
    Frame,
    Shape,
    StreamEvent,
    StreamStart,
    TokenLogprob,
    Usage,
    UsageReport,
)
from gateway.dialects.common import logprobs_from, usage_from
from gateway.dialects.openai.vllm_fields import forced_end

JSON = Any


def finish_from(value: JSON) -> FinishReason | None:
    if value is None or value == "null":
        return None
    if value == "error":
        raise UpstreamFailed("upstream reported an internal error for this generation")
    if value in FINISH_REASONS:
        return value  # type: ignore[no-any-return]
    if value == "cancelled":
        return "abort"
    return "stop"  # vendor-specific reasons (vLLM "repetition", ...) are normal stops


def stop_string(choice: JSON) -> str | None:
    """vLLM's ``stop_reason``: the stop string that ended a choice (a token id is no string)."""
    reason = choice.get("stop_reason")
    return reason if isinstance(reason, str) else None


# A key whose value the gateway must see (a finish reason, usage, an error), unless it is null.
ACCOUNTED = re.compile(rb'"(?:finish_reason|usage|error)"(?!:null)')
# The same over a run of chunks, a scan each: a pattern that opens with a quote is tried at every
# quote of a run; one that opens with a rarer literal is found by a fast search, several times
# quicker (docs/performance.md). ``_reason"`` takes vLLM's ``stop_reason`` too: a stop reason's chunk
# is decoded. One chunk (``relay``) keeps ``ACCOUNTED``: three calls cost more than one there.
FINISHED = re.compile(rb'_reason"(?!:null)')
USAGE_OR_ERROR = ((b'"usage"', re.compile(rb'"usage"(?!:null)')), (b'"error"', re.compile(rb'"error"(?!:null)')))
# What stops a run, in one scan of one event: the three above, in one pattern (``_reason"`` alone has
# no literal to search for first; vLLM's ``stop_reason`` is the other reason a chunk carries).
EVENT_ACCOUNTED = re.compile(rb'"(?:finish_reason|stop_reason|usage|error)"(?!:null)')
# Where one token's chunk differs from the last: its text, opened by one of these keys. A text without
# a quote, backslash or newline leaves the chunk's keys and framing as they were.
TEXT_KEYS = (b'"text":"', b'"content":"')
NOT_PLAIN = re.compile(rb'["\\\n]')
CLOSERS = (b",", b"}")
# vLLM's ids of a chunk's tokens, after its text (``return_token_ids``): where a stream that may
# resume differs from token to token besides its text.
IDS_KEY = b'"token_ids":['
IDS = re.compile(rb"\d+(?:,\d+)*")


@functools.lru_cache(maxsize=64)  # a server writes the same keys around every stream's ids
def after_text(mid: bytes, tail: bytes) -> re.Pattern[bytes]:
    """What follows the head of a shape (head, mid, tail) in its events: a plain text, ``mid``, ids and
    ``tail``. One match: slices and a pattern per part cost more (7.8k against 5.8k instructions a
    check, callgrind)."""
    return re.compile(rb'[^"\\\n]*' + re.escape(mid) + rb"\d+(?:,\d+)*" + re.escape(tail))


def shape(event: bytes) -> tuple[bytes, bytes] | None:
    """A relayed event around its text, (head, tail), when the text is plain (``NOT_PLAIN``) and
    closed as JSON closes a value (by ``,`` or ``}``): then no key the retouch looks for can take in
    a byte of another plain text put in its place (``ChunkEncoder``)."""
    for key in TEXT_KEYS:
        if (at := event.find(key)) >= 0:
            start = at + len(key)
            end = event.find(b'"', start)
            if end < 0 or NOT_PLAIN.search(event, start, end) is not None or event[end + 1 : end + 2] not in CLOSERS:
                return None
            return event[:start], event[end:]
    return None


def cut_ids(found: tuple[bytes, bytes]) -> Shape | None:
    """A shape whose tail holds its token's ids (the upstream was asked for them) cut around them,
    (head, mid, tail); one whose tail holds none, as it is."""
    head, tail = found
    if (cut := tail.find(IDS_KEY)) < 0:
        return found
    cut += len(IDS_KEY)
    close = tail.find(b"]", cut)
    return (head, tail[:cut], tail[close:]) if IDS.fullmatch(tail, cut, close) else None


class ChunkDecoder:
    """OpenAI-shaped stream chunks → events. Usage may come on an empty-choices chunk (OpenAI), on
    the last content chunk (OctoAI) or on every chunk (vLLM continuous stats): the last one wins and
    is reported once, at the end.

    Relaying (the client's stream is OpenAI-shaped too), a chunk that only carries content goes out as
    it came (``relay``), for the client's encoder to retouch into its style in bytes; the first chunk
    (the stream's identity), finishes (whose reasons are mapped),
    usage and errors are still decoded. The test is on bytes: in compact JSON a key can only be matched
    outside strings (a quote inside one is escaped), and any other spelling just takes the decoder."""

    __slots__ = (
        "chat",
        "choices",
        "ended",
        "finished",
        "ids_shape",
        "output_logprobs",
        "prompt_echoed",
        "relaying",
        "shape",
        "started",
        "stops",
        "tails",
        "token_ids",
        "trimmed",
        "usage",
    )

    def __init__(
        self,
        operation: Operation,
        relay: bool = False,
        token_ids: bool = True,
        prompt_logprobs: bool | None = None,
        stops: tuple[tuple[int, ...], ...] = (),
        choices: int = 1,
    ) -> None:
        """``prompt_logprobs``: the prompt's logprobs were asked for through an echo (``encode``), so
        each choice's first chunk opens with them; True if the client asked for output logprobs too.
        ``stops``: multi-token stop sequences, whose forced end token is taken out (``forced_end``):
        every chunk is decoded then, to follow each choice's last ids. ``choices``: how many the
        stream carries (``InternalRequest.choice_count``): ``finished`` once each has finished."""
        self.chat = operation is Operation.CHAT
        self.choices = choices
        self.ended: set[int] = set()  # the choices finished, while some are still under way
        self.prompt_echoed = prompt_logprobs is not None
        self.output_logprobs = bool(prompt_logprobs)
        self.started = False
        self.finished = False
        self.usage: Usage | None = None
        self.relaying = relay
        self.token_ids = token_ids  # chunks may carry them (the upstream was asked)
        self.shape: tuple[bytes, bytes] | None = None  # the last event relayed alone (``relay_run``)
        self.ids_shape: tuple[bytes, re.Pattern[bytes]] | None = None  # the same, where it holds ids
        self.stops = stops
        self.tails: dict[int, list[int]] = {}  # per choice, its last ids (as long as the longest stop)
        self.trimmed = 0  # forced end tokens taken out

    def end(self, index: int) -> None:
        """Choice ``index`` finished: the stream is complete at its end once every choice has (one
        finished of several, the stream cut before the next, is no complete answer)."""
        if self.choices > 1:
            self.ended.add(index)
            self.finished = len(self.ended) >= self.choices
        else:
            self.finished = True

    def relay(self, data: bytes) -> Frame | None:
        """The SSE frame to write for this chunk unchanged, or None when it must be decoded."""
        if (
            not self.started
            or not self.relaying
            or data[:2] != b'{"'  # an object with keys ({} carries nothing to relay)
            or data[-1:] != b"}"
            or b"\n" in data  # an event over several data: lines is written as one
            or ACCOUNTED.search(data) is not None
        ):
            return None
        return Frame(b"data: " + data + b"\n\n")

    def relay_run(self, buffer: bytes) -> tuple[Frame, int] | None:
        """The whole events that open ``buffer`` (read at an event boundary) and would each be relayed,
        as one frame, and the bytes they take; None when the first event needs the parser. A network
        read under load carries many chunks: they are checked with a few scans of the whole run (for
        the keys to decode, then counts), not split and tested one by one."""
        if not self.started or not self.relaying:
            return None
        if buffer[-3:] == b"}\n\n":  # maybe one whole event, as a model server writes a token
            if self.same_shape(buffer):  # the last one's keys and framing around a plain text: relayed too
                return Frame(buffer), len(buffer)
            if buffer.count(b"\n") == 2:  # one pattern, not the run's scans
                if buffer[:8] != b'data: {"' or EVENT_ACCOUNTED.search(buffer) is not None:
                    return None
                frame = Frame(buffer)
                plain = shape(buffer)
                lent = cut_ids(plain) if plain is not None and self.token_ids else plain
                frame.shape = lent  # the next tokens of it: ``same_shape``
                if lent is not None and len(lent) == 3:
                    self.shape, self.ids_shape = None, (lent[0], after_text(lent[1], lent[2]))
                else:
                    self.shape, self.ids_shape = lent, None
                return frame, len(buffer)
        end = buffer.rfind(b"\n\n") + 2  # whole events only: a partial one waits for the parser
        cut = end  # where the first accounted key is (``ACCOUNTED``'s matches, found faster)
        if finished := FINISHED.search(buffer, 0, cut):
            cut = finished.start()
        for key, pattern in USAGE_OR_ERROR:  # mostly absent: a find, the pattern only from a key found
            if (at := buffer.find(key, 0, cut)) >= 0 and (found := pattern.search(buffer, at, cut)):
                cut = found.start()
        if cut < end:  # the run stops before the event that holds it
            end = buffer.rfind(b"\n\n", 0, cut) + 2
        if end < 2:
            return None
        # Every event one line 'data: {"...}': with 2k newlines, k - 1 boundaries '}\n\ndata: {"' and the
        # final "}\n\n" hold them all ([DONE], {}, comments, "event:" and CRLF framing all fail this).
        newlines = buffer.count(b"\n", 0, end)  # a one-byte needle: the cheapest of the scans
        if (
            newlines % 2
            or not buffer.startswith(b'data: {"')
            or not buffer.endswith(b"}\n\n", 0, end)
            or buffer.count(b'}\n\ndata: {"', 0, end) != newlines // 2 - 1
        ):
            return None
        return Frame.of(buffer[:end] if end < len(buffer) else buffer, newlines // 2), end

    def same_shape(self, buffer: bytes) -> bool:
        """``buffer`` is one whole event of the shape the last event relayed alone carried: its keys and
        framing around a plain text. Relayed as it is (a ``Token``), without ``relay_run``'s checks: a
        stream's tokens mostly differ only in their texts (and ids, where asked for: then its head,
        and one pattern for the rest, ``after_text``; in this call, a call less a token)."""
        shape = self.shape
        if shape is None:
            if (ids := self.ids_shape) is None:
                return False
            head, rest = ids
            return buffer[: len(head)] == head and rest.fullmatch(buffer, len(head)) is not None
        head, tail = shape
        start, end = len(head), len(buffer) - len(tail)
        return (
            end >= start
            and buffer[:start] == head
            and buffer[end:] == tail
            and NOT_PLAIN.search(buffer, start, end) is None
        )

    def decode(self, data: JSON) -> list[StreamEvent]:
        if not isinstance(data, dict):
            raise UpstreamMalformed("upstream stream chunk is not a JSON object")
        if data.get("error"):
            err = data["error"]
            message = err.get("message") if isinstance(err, dict) else str(err)
            raise UpstreamFailed(f"upstream stream failed: {message}")
        events: list[StreamEvent] = []
        if not self.started:
            self.started = True
            events.append(
                StreamStart(
                    str(data.get("id") or ""),
                    int(data.get("created") or 0),
                    str(data.get("model") or ""),
                    data.get("system_fingerprint"),
                    self.token_ids,
                )
            )
        for c in data.get("choices") or ():
            index = int(c.get("index", 0))
            delta = c.get("delta") or {} if self.chat else c
            text = (delta.get("content") if self.chat else c.get("text")) or ""
            ids = c.get("token_ids") or ((c["token"],) if c.get("token") is not None else ())
            lps = logprobs_from(c["logprobs"]) if c.get("logprobs") is not None else None
            if self.prompt_echoed:
                lps = self.split_prompt(lps or [], c.get("prompt_token_ids"))
            tools = delta.get("tool_calls") or () if self.chat else ()
            reasoning = (delta.get("reasoning_content") or delta.get("reasoning")) if self.chat else None
            role = delta.get("role") if self.chat else None
            reason = finish_from(c.get("finish_reason"))
            if self.stops and ids:
                ids, lps = self.trim(index, list(ids), lps, reason)
            if text or ids or lps or tools or reasoning or role:
                events.append(Delta(index, text, tuple(ids), tuple(lps or ()), role, tuple(tools), reasoning))
            if reason is not None:
                self.end(index)
                events.append(Finish(index, reason, c.get("seed"), stop_string(c)))
        if data.get("usage") is not None:  # most chunks carry none, or null
            self.usage = usage_from(data["usage"]) or self.usage
        return events

    def trim(
        self, index: int, ids: list[int], lps: list[TokenLogprob] | None, reason: FinishReason | None
    ) -> tuple[list[int], list[TokenLogprob] | None]:
        """One chunk's ids (and logprobs) without the end token forced after a stop sequence."""
        seen = self.tails.get(index, []) + ids
        self.tails[index] = seen[-max(len(s) for s in self.stops) :]
        if reason == "stop" and forced_end(seen, self.stops):
            self.trimmed += 1
            if lps is not None and len(lps) == len(ids):
                lps = lps[:-1]
            ids = ids[:-1]
        return ids, lps

    def finish(self) -> list[StreamEvent]:
        usage = self.usage
        if usage is None:
            return []
        if self.trimmed:
            usage = replace(usage, completion_tokens=max(0, usage.completion_tokens - self.trimmed))
        return [UsageReport(usage)]

    def split_prompt(self, lps: list[TokenLogprob], prompt_ids: JSON) -> list[TokenLogprob]:
        """An echoed stream's logprobs as asked: on the chunk carrying the prompt's ids, its tokens'
        own logprobs first (the first token excluded), then the output's if the client asked for them.
        vLLM leaves the prompt's text out when token ids are asked for, which they always are here."""
        prompt = []
        if isinstance(prompt_ids, list):
            head, lps = lps[: len(prompt_ids)], lps[len(prompt_ids) :]
            prompt = [TokenLogprob(t.token, t.logprob) for t in head[1:]]
        return prompt + (lps if self.output_logprobs else [])

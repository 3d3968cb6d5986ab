"""Fault markers: ``[[fault:...]]`` in a prompt (any string of a batch) or in the last chat message asks
the fake to misbehave, so faults work through the gateway from any client. Several markers combine.

* ``status=500`` (any status) answers that status in the wire's error envelope; ``retry_after=2`` adds
  ``Retry-After: 2``.
* ``reset_before`` drops the TCP connection before any header is sent.
* ``reset_after=3`` streams three token chunks, then drops the connection (no ``[DONE]``); on a
  non-streaming request it drops the connection instead of answering.
* ``error_after=2`` streams two token chunks, then vLLM's in-stream error event (after the 200).
* ``stall_after=2`` streams two token chunks, then sends nothing more until the client hangs up (a
  stalled or SIGSTOPped server: the connection stays open).
* ``hold_after=2`` streams two token chunks, then holds the rest until the test opens the fake's gate
  (``Upstream.release()``) or the client hangs up: a stream that ends when the test says.
* ``ping_after=2`` streams two token chunks, then only keep-alives (an SSE comment; Anthropic's
  ``ping`` event on its wire) every ``PING_SECONDS`` until the client hangs up: an engine stuck
  mid-answer behind something that keeps its connection alive, so no read waits long.
* ``first_token=S`` sends the response head at once, then waits S seconds before the first event
  (a server that is up but slow to its first token).
* ``truncate`` answers a whole body cut in the middle: its ``Content-Length`` promised the whole,
  then the connection drops (``truncate=chunked``: a chunked body that stops without its last chunk).
* ``hang_before=S`` waits S seconds before answering.
* ``hang_between=S`` and ``slow=S`` (the same delay) wait S seconds before every stream event after the
  first, ``[DONE]`` included; a non-streaming answer waits S per token.
* ``end_after=S`` ends a stream's body (HTTP's last chunk) S seconds after its ``[DONE]``: vLLM's server
  writes the end in a write of its own.
* ``burst`` writes the whole stream at once, as a busy upstream's reads arrive.
* ``probes_hang`` (in the server's own ``faults``): /health and /metrics never answer, as a starved
  engine's; a prober's timeout is what ends the wait.
* ``cached=N`` is no fault: the usage reports N of the prompt tokens as served from a prefix cache
  (``prompt_tokens_details.cached_tokens``, as OpenAI and vLLM report them).
* ``cache_write=N`` is no fault either: an Anthropic-wire usage reports N prompt tokens written to its
  prompt cache (``cache_creation_input_tokens``).
* ``dense`` is no fault either: the usage counts the prompt as a byte-level tokenizer's worst case,
  one token per UTF-8 byte of each prompt as rendered (the chat template's text included) and one
  more, as token-dense text (punctuation, digits, rare scripts) costs.
* ``dense_answer`` is no fault either: the usage counts the answer a token per UTF-8 byte of its
  text, as a token-dense answer costs, while the stream still sends a word per chunk (so a chunk
  holds several of the tokens counted).
* ``tool=NAME`` makes a chat offered tools call NAME (not the first); ``tool_arg=TEXT`` gives each of
  its required string arguments that text (not the answer's first word).
* ``once:...`` applies only to the first request carrying that exact marker text, so a retry succeeds;
  add ``id=x`` to tell two otherwise equal markers apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from tests.fakes.upstream.errors import ApiError
from tests.fakes.upstream.jobs import message_text

FAULT_RE: Final = re.compile(r"\[\[fault:(once:)?([^\]]*)\]\]")
FAULT_KEYS: Final = frozenset(
    {"status", "retry_after", "reset_before", "reset_after", "error_after", "hang_before", "hang_between", "slow"}
    | {"burst", "id", "cached", "cache_write", "tool", "tool_arg", "stall_after", "first_token", "truncate"}
    | {"probes_hang", "end_after", "dense", "dense_answer", "ping_after", "hold_after"}
)


@dataclass(frozen=True, slots=True)
class Faults:
    status: int | None = None
    retry_after: str | None = None
    reset_before: bool = False
    reset_after: int | None = None
    error_after: int | None = None
    hang_before: float = 0.0
    gap: float = 0.0  # hang_between + slow: seconds before every stream event after the first
    burst: bool = False
    cached: int = 0
    cache_write: int = 0
    tool: str | None = None
    tool_arg: str | None = None
    stall_after: int | None = None
    ping_after: int | None = None
    hold_after: int | None = None
    first_token: float = 0.0
    truncate: str | None = None  # "length" (a Content-Length the body falls short of) or "chunked"
    probes_hang: bool = False
    end_after: float = 0.0
    dense: bool = False
    dense_answer: bool = False

    def injected(self) -> ApiError:
        headers = {"Retry-After": self.retry_after} if self.retry_after else {}
        return ApiError(self.status or 500, f"fake upstream: injected {self.status}", None, headers)


def parse_faults(text: str, fired: set[str]) -> Faults:
    """Every marker in ``text``; a ``once:`` marker only the first time it is seen."""
    fields: dict[str, str] = {}
    for match in FAULT_RE.finditer(text):
        if match.group(1):
            if match.group(0) in fired:
                continue
            fired.add(match.group(0))
        for item in filter(None, (part.strip() for part in match.group(2).split(","))):
            key, _, value = item.partition("=")
            fields[key.strip()] = value.strip()
    if unknown := set(fields) - FAULT_KEYS:
        raise ApiError(500, f"fake upstream: unknown fault key(s) {sorted(unknown)} in {text!r}")
    try:
        return Faults(
            status=int(fields["status"]) if "status" in fields else None,
            retry_after=fields.get("retry_after"),
            reset_before="reset_before" in fields,
            reset_after=int(fields["reset_after"]) if "reset_after" in fields else None,
            error_after=int(fields["error_after"]) if "error_after" in fields else None,
            hang_before=float(fields.get("hang_before") or 0),
            gap=float(fields.get("hang_between") or 0) + float(fields.get("slow") or 0),
            burst="burst" in fields,
            cached=int(fields.get("cached") or 0),
            cache_write=int(fields.get("cache_write") or 0),
            tool=fields.get("tool"),
            tool_arg=fields.get("tool_arg"),
            stall_after=int(fields["stall_after"]) if "stall_after" in fields else None,
            ping_after=int(fields["ping_after"]) if "ping_after" in fields else None,
            hold_after=int(fields["hold_after"]) if "hold_after" in fields else None,
            first_token=float(fields.get("first_token") or 0),
            truncate=(fields["truncate"] or "length") if "truncate" in fields else None,
            probes_hang="probes_hang" in fields,
            end_after=float(fields.get("end_after") or 0),
            dense="dense" in fields,
            dense_answer="dense_answer" in fields,
        )
    except ValueError as exc:
        raise ApiError(500, f"fake upstream: bad fault marker value ({exc})") from None


def marker_text(body: dict[str, Any]) -> str:
    """Where faults are read from: the prompt text(s), or the last chat message's content (a system turn
    after it is not the turn the marker is in: Claude Code puts one after the user's first message)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        turns = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]
        last = turns[-1] if turns else None
        content = last.get("content") if isinstance(last, dict) else None
        return message_text(content) if isinstance(content, str | list) else ""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else ""

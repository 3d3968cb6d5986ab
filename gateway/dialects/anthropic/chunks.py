"""OpenAI-shaped chunks that an OpenAI-wire target's reader relays as they came (``Frame``, ``Token``:
``InternalRequest.relay``) → Anthropic's ``text_delta`` events, in bytes.

A Messages stream over an OpenAI-compatible target is mostly one text delta per token. Decoding each
chunk's JSON into a ``Delta`` and writing a new event for it cost the Messages row 60% more CPU per
stream than the chat row, which relays chunks as bytes. Here a chunk whose keys and framing around its
text are those of one already decoded into a text delta alone (its ``shape``, ``openai.chunks.shape``:
the text holds no quote, backslash or newline) has its text bytes put into the event as they are: the
same bytes ``pydantic_core.to_json`` writes for such a text. Any other chunk is decoded as before.

What does not belong here: the event sequence itself (``render.MessagesEncoder``).
"""

from __future__ import annotations

from typing import TypeGuard

import pydantic_core

from gateway.core.request import Operation
from gateway.core.response import Delta, StreamEvent
from gateway.dialects.openai.chunks import NOT_PLAIN, ChunkDecoder, shape

Shape = tuple[bytes, bytes]

TEXT_DELTA = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
TEXT_KEY = b',"delta":{"type":"text_delta","text":'
TEXT_END = b'"}}\n\n'  # after a spliced text: its closing quote, then the delta's and the event's


def text_head(index: int) -> bytes:
    """A text block's ``content_block_delta`` event up to its text's value (a JSON string follows)."""
    return TEXT_DELTA + str(index).encode() + TEXT_KEY


def text_event(head: bytes, text: str) -> bytes:
    return head + pydantic_core.to_json(text) + b"}}\n\n"


class ChunkText:
    """The relayed chunks of one stream: ``shape`` is that of the last chunk found to be a text delta
    alone, whose text a chunk of the same shape is taken from without decoding."""

    __slots__ = ("decoder", "joint", "shape")

    def __init__(self) -> None:
        self.decoder = ChunkDecoder(Operation.CHAT)
        self.decoder.started = True  # a relayed chunk follows the stream's first, decoded by the reader
        self.shape: Shape | None = None
        self.joint = b""  # a tail, then the next event's head

    def learn(self, found: Shape | None) -> None:
        self.shape = found
        if found is not None:
            self.joint = found[1] + found[0]

    def texts(self, frame: bytes, chunks: int, head: bytes) -> bytes | None:
        """A relayed frame of ``chunks`` one-line events (``relay_run``: two newlines an event), each
        of the known shape around a plain, non-empty text, as the text block's events, ``head``
        opening each; else None.

        The frame opens with a head and ends with a tail, and each of its events' boundaries is a
        tail then a head (a tail ends with its event's blank line): every event is head, text, tail,
        and the texts are cut out at once and checked together. Long needles are slow to replace
        (about 40 us a burst's 12 KB): the frame is split at its blank lines instead."""
        if (known := self.shape) is None:
            return None
        before, after = known
        if not frame.startswith(before) or not frame.endswith(after) or frame.count(self.joint) != chunks - 1:
            return None
        start, end = len(before), 2 - len(after)  # (an event less its blank line)
        texts = [event[start:end] for event in frame.split(b"\n\n")[:-1]]
        if b"" in texts or NOT_PLAIN.search(b"".join(texts)) is not None:
            return None
        opening = head + b'"'
        return opening + (TEXT_END + opening).join(texts) + TEXT_END

    def text(self, event: bytes) -> bytes | None:
        """The text of ``event`` (one whole ``data:`` event), when it has the known shape; else None."""
        if (known := self.shape) is None:
            return None
        head, tail = known
        start, end = len(head), len(event) - len(tail)
        if end < start or event[:start] != head or event[end:] != tail or NOT_PLAIN.search(event, start, end):
            return None
        return event[start:end]

    def decode(self, event: bytes) -> list[StreamEvent]:
        """``event`` decoded; a text delta alone lends the stream its shape."""
        events = self.decoder.decode(pydantic_core.from_json(event[6:]))  # after "data: "
        if len(events) == 1 and plain_text(one := events[0]) and (found := shape(event)) is not None:
            self.learn(found if text_of(event, found) == one.text.encode() else None)
        return events


def text_of(event: bytes, around: Shape) -> bytes:
    """The bytes between a shape's head and tail: a delta's text only if the shape was found around it
    (not around another key's value)."""
    return event[len(around[0]) : len(event) - len(around[1])]


def plain_text(ev: StreamEvent) -> TypeGuard[Delta]:
    """A delta of the first choice's text and nothing else (a role only says who speaks)."""
    return (
        type(ev) is Delta
        and ev.index == 0
        and bool(ev.text)
        and not (ev.token_ids or ev.logprobs or ev.tool_calls or ev.reasoning)
    )


def events(frame: bytes) -> list[bytes]:
    """A relayed frame's whole events, each with its blank line (one line ``data: {...}`` each)."""
    return [e + b"\n\n" for e in frame[:-2].split(b"\n\n")]

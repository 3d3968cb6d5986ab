"""Relayed upstream chunks (OpenAI's shape, a ``Frame``) turned into another OpenAI-shaped style's
chunks, in bytes.

A content-only chunk differs between OpenAI-shaped styles in a few keys (Friendli has no
``system_fingerprint`` and a ``token`` where vLLM writes ``token_ids``; OctoAI needs a fingerprint and
puts no ``usage`` on content chunks; every style names a chat delta's reasoning ``reasoning_content``,
where vLLM writes ``reasoning``), so a relayed chunk reads as its decoded twin would. Rewriting those
keys costs a few scans of a whole run of chunks, where decoding and re-encoding each chunk costs
microseconds.

Each pattern holds a quote right after ``{`` or ``,`` or right before ``:``. Inside a JSON string
every quote is escaped (``\\"``), so a pattern can only match a key of the chunk object, never text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gateway.core.response import Frame

# vLLM's ids sampled for a chunk, or none (the key goes, with the comma on one side of it).
TOKEN_IDS = re.compile(rb'"token_ids":\[(?:\d+,)*(\d+)\]|,"token_ids":(?:\[\]|null)|"token_ids":(?:\[\]|null),')
# vLLM's ids (the output's, or the prompt's): written ``null`` (``Retouch.hide_ids``), as vLLM writes
# them when not asked. Opened by a literal, the pattern is found by a fast search; one opened by a
# quote or a comma is tried at each of them (an order of magnitude slower over a burst's run).
SHOWN_IDS = re.compile(rb'token_ids":\[[\d,]*\]')
NO_IDS = b'token_ids":null'
FINGERPRINT = b'"system_fingerprint":'
# Any fingerprint, with the comma on one side of it (a chunk's may differ from the first chunk's).
ANY_FINGERPRINT = re.compile(
    rb',"system_fingerprint":(?:null|"(?:[^"\\]|\\.)*")|"system_fingerprint":(?:null|"(?:[^"\\]|\\.)*"),'
)
CHUNK = b"data: {"
BOUNDARY = b"\n\n" + CHUNK  # newlines inside a JSON string are escaped: only events are cut here


def _token(match: re.Match[bytes]) -> bytes:
    # A stream choice carries the one token it sampled (dialects.md §2.7): the last of the list.
    last = match.group(1)
    return b'"token":' + last if last is not None else b""


def without_key(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """``"key":value`` with the comma that goes with it: where it usually stands (after other keys),
    and first in its object."""
    pair = b'"' + key + b'":' + value
    return b"," + pair, pair + b","


@functools.lru_cache(maxsize=256)  # a stream's fingerprint is mostly its upstream's: few values
def removal(key: bytes, value: bytes) -> re.Pattern[bytes]:
    """``,"key":value`` (its usual place, after other keys) as a pattern: a regex removes a literal
    from a burst's run in one scan, where ``bytes.replace`` takes two (it counts first)."""
    return re.compile(re.escape(without_key(key, value)[0]))


@dataclass(frozen=True, slots=True)
class Retouch:
    """One stream's rewrite of relayed frames: built when the stream starts (its first chunk is
    always decoded), applied to every frame after."""

    # Keys dropped, each as ``without_key`` spells it: usual, then first in its object. A chunk names a
    # key once, so once the usual spelling went from every chunk no other is left to look for.
    drops: tuple[tuple[bytes, bytes], ...] = ()
    head: bytes = b""  # keys written first in every chunk
    token_ids: bool = False  # vLLM's per-chunk ``token_ids`` become the style's single ``token``
    # Fingerprints all go: this removes the usual one (the first chunk's value, after other keys),
    # ``ANY_FINGERPRINT`` any left
    fingerprint: re.Pattern[bytes] | None = None
    kept: bytes = b""  # a fingerprint every chunk may keep where it stands (no fingerprint work then)
    reasoning: bool = False  # vLLM's ``reasoning`` is named ``reasoning_content``
    hide_ids: bool = False  # vLLM's ``token_ids`` are null: the client's dialect shows none

    def __call__(self, frame: bytes) -> bytes:
        # the events a frame holds were counted where it was cut (a plain bytes' are counted here)
        chunks = frame.chunks if isinstance(frame, Frame) else frame.count(b"\n\n")
        for usual, first in self.drops:
            size = len(frame)
            frame = frame.replace(usual, b"")
            if size - len(frame) != chunks * len(usual):
                frame = frame.replace(first, b"")
        if self.token_ids and b'"token_ids":' in frame:
            frame = TOKEN_IDS.sub(_token, frame)
        elif self.hide_ids:
            frame = SHOWN_IDS.sub(NO_IDS, frame)
        # (a delta that already names it reasoning_content keeps it; the other is an extra)
        if self.reasoning and b'"reasoning":' in frame and b'"reasoning_content":' not in frame:
            frame = frame.replace(b'"reasoning":', b'"reasoning_content":')
        if self.kept and frame.count(self.kept) == chunks:
            return frame  # every chunk already names the fingerprint it should (a scan, no copies)
        if self.fingerprint is not None:
            # The usual spelling in one pass. A chunk names its fingerprint once (an object's keys are
            # unique), so when the pass took one per chunk, none is left; else any left (first in its
            # object, another value, a chunk without) are looked for. Each scan of a burst's run is
            # microseconds: the other literal spelling is not looked for on its own.
            frame, taken = self.fingerprint.subn(b"", frame)
            if taken != chunks and FINGERPRINT in frame:
                frame = ANY_FINGERPRINT.sub(b"", frame)
        if self.head:
            # A frame is whole events, each one line "data: {...}": every chunk opens the frame or
            # follows a boundary. (split and join: one scan, where replace counts first; the first
            # event is the only one copied twice)
            events = frame.split(BOUNDARY)
            events[0] = CHUNK + self.head + events[0][len(CHUNK) :]
            frame = (BOUNDARY + self.head).join(events)
        return frame

"""A sans-IO server-sent-events reader: feed it bytes as they arrive, get whole events back.

Tolerant on input (CRLF or LF, comments, ``event:`` names, multi-line ``data:``), because upstreams
differ: SGP names its error events, Friendli's tool-assisted chat mixes named events in (dialects.md
§2.7, §3.5). What the gateway *writes* is decided per dialect in the encoders, not here.
"""

from __future__ import annotations

from typing import NamedTuple


class Event(NamedTuple):
    """One event (a tuple: a stream makes one per chunk, and a frozen dataclass costs 3x to build)."""

    data: str
    event: str | None = None


class SSEParser:
    __slots__ = ("_buffer", "_data", "_event")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        # One split per network read, not a slice per line: a read can carry a whole stream's events.
        lines = (self._buffer + chunk if self._buffer else chunk).split(b"\n")
        self._buffer = lines.pop()  # the unfinished last line waits for the rest
        events: list[Event] = []
        for raw in lines:
            if raw[-1:] == b"\r":
                raw = raw[:-1]
            if raw.startswith(b"data: "):  # nearly every line: no str round trip for the field name
                self._data.append(raw[6:].decode("utf-8", errors="replace"))
                continue
            if not raw:
                if self._data or self._event:
                    events.append(self._dispatch())
                continue
            event = self._line(raw.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[Event]:
        """The stream ended: a final event not followed by a blank line still counts."""
        events = self.feed(b"\n") if self._buffer else []
        if self._data:
            events.append(self._dispatch())
        return events

    def _line(self, line: str) -> Event | None:
        if not line:
            return self._dispatch() if self._data or self._event else None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def _dispatch(self) -> Event:
        data = self._data
        event = Event(data[0] if len(data) == 1 else "\n".join(data), self._event)
        self._data = []
        self._event = None
        return event

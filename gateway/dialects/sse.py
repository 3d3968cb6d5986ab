"""A sans-IO server-sent-events reader: feed it bytes as they arrive, get whole events back.

Tolerant on input (CRLF or LF, comments, ``event:`` names, multi-line ``data:``), because upstreams
differ: SGP names its error events, Friendli's tool-assisted chat mixes named events in (dialects.md
§2.7, §3.5). What the gateway *writes* is decided per dialect in the encoders, not here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    data: str
    event: str | None = None


class SSEParser:
    __slots__ = ("_buffer", "_data", "_event")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events: list[Event] = []
        while True:
            nl = self._buffer.find(b"\n")
            if nl < 0:
                return events
            raw, self._buffer = self._buffer[:nl], self._buffer[nl + 1 :]
            line = raw[:-1] if raw.endswith(b"\r") else raw
            event = self._line(line.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)

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
        event = Event("\n".join(self._data), self._event)
        self._data = []
        self._event = None
        return event

"""A sans-IO server-sent-events reader: feed it bytes as they arrive, get whole events back.

Tolerant on input (CRLF or LF, comments, ``event:`` names, multi-line ``data:``), because upstreams
differ: SGP names its error events, Friendli's tool-assisted chat mixes named events in (dialects.md
§2.7, §3.5). What the gateway *writes* is decided per dialect in the encoders, not here.
"""

from __future__ import annotations

from typing import NamedTuple


class Event(NamedTuple):
    """One event (a tuple: a stream makes one per chunk, and a frozen dataclass costs 3x to build).
    ``data`` stays bytes: JSON parses from bytes, and a same-format relay writes them out unchanged."""

    data: bytes
    event: str | None = None


class SSEParser:
    __slots__ = ("_buffer", "_data", "_data_bytes", "_event", "_more", "_more_bytes")

    # An unfinished line or event longer than this waits in pieces, joined once its end arrives:
    # joining and re-scanning it on every read would cost quadratic time in its length.
    LONG = 64 * 1024

    def __init__(self) -> None:
        self._buffer = b""
        self._more: list[bytes] = []  # what came after _buffer while a long line or event waits
        self._more_bytes = 0
        self._data: list[bytes] = []
        self._data_bytes = 0  # what _data holds: an event's lines wait there for its end
        self._event: str | None = None

    @property
    def pending(self) -> int:
        """Bytes of the unfinished event: the reader's bound on what an upstream may make it hold."""
        return len(self._buffer) + self._more_bytes + self._data_bytes

    def feed(self, chunk: bytes) -> list[Event]:
        if self._more or len(self._buffer) > self.LONG:
            # Nothing comes out before an event's end (a blank line, maybe cut between two reads); a
            # CR may be half of one (CRLF framing): then everything is joined as usual.
            last = self._more[-1] if self._more else self._buffer
            seam = chunk[:1] == b"\n" and last[-1:] == b"\n"
            if b"\n\n" not in chunk and not seam and b"\r" not in chunk:
                self._more.append(chunk)
                self._more_bytes += len(chunk)
                return []
            self._gather()
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:  # CRLF framing; a CR ending the buffer stays in the unfinished line
            buffer = buffer.replace(b"\r\n", b"\n")
        if not self._data and self._event is None:
            events = self._one_line_events(buffer)
            if events is not None:
                return events
        return self._lines(buffer)

    def _one_line_events(self, buffer: bytes) -> list[Event] | None:
        """What nearly every upstream sends, read event by event: each whole event one ``data: `` line
        (half the splits and tests of reading line by line). None, with nothing consumed, when any
        whole event in ``buffer`` is framed otherwise: the line reader then takes the buffer."""
        pieces = buffer.split(b"\n\n")
        rest = pieces.pop()  # the unfinished event waits for the rest
        # The whole events' newlines are exactly their separators: no event has a second line.
        if buffer.count(b"\n", 0, len(buffer) - len(rest)) != 2 * len(pieces):
            return None
        events: list[Event] = []
        for piece in pieces:
            if not piece.startswith(b"data: "):
                return None
            events.append(tuple.__new__(Event, (piece[6:], None)))
        self._buffer = rest
        return events

    def _lines(self, buffer: bytes) -> list[Event]:
        # One split per network read, not a slice per line: a read can carry a whole stream's events.
        lines = buffer.split(b"\n")
        self._buffer = lines.pop()  # the unfinished last line waits for the rest
        events: list[Event] = []
        data = self._data
        for raw in lines:
            if raw.startswith(b"data: "):  # nearly every line
                data.append(raw[6:])
                self._data_bytes += len(raw) + 1  # the line as read: empty data lines count too
            elif raw:
                self._field(raw)
            elif data or self._event:
                # tuple.__new__: the NamedTuple constructor is a Python-level call, twice the cost
                events.append(tuple.__new__(Event, (data[0] if len(data) == 1 else b"\n".join(data), self._event)))
                data = self._data = []
                self._data_bytes = 0
                self._event = None
        return events

    @property
    def idle(self) -> bool:
        """Between events: nothing of a line or an event is waiting for more bytes."""
        return not self._buffer and not self._data and self._event is None

    def close(self) -> list[Event]:
        """The stream ended: a final event not followed by a blank line still counts."""
        self._gather()
        events = self._lines((self._buffer + b"\n").replace(b"\r\n", b"\n")) if self._buffer else []
        if self._data:
            events += self._lines(b"\n")  # the blank line the stream never sent
        return events

    def _gather(self) -> None:
        """The pieces of a long line or event, back in the buffer."""
        if self._more:
            self._buffer += b"".join(self._more)
            self._more, self._more_bytes = [], 0

    def _field(self, line: bytes) -> None:
        if line.startswith(b":"):  # a comment (keep-alive pings)
            return
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._data_bytes += len(line) + 1
        elif name == b"event":
            self._event = value.decode("utf-8", errors="replace")

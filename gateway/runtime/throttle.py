"""Log lines that something outside the gateway can cause once per request or per message (a client's
bad body, a replica's bad batch, a flapping Redis): at most one line per kind every ``every`` seconds,
the lines held back in between counted and told with the next one. A flood of causes is a line a
period, never a line each.

Not here: what is logged (the callers' words), or lines the gateway's own state changes cause once
(an outage beginning and ending: ``gateway/limits/failover.py``).
"""

from __future__ import annotations

import logging
import time
import weakref

EVERY_SECONDS = 30.0
MAX_KINDS = 1024  # kinds remembered at once; past it the oldest are forgotten (their next line is told)
_ALL: weakref.WeakSet[LogThrottle] = weakref.WeakSet()


def forget_all() -> None:
    """Every throttle forgets what it said: the next line of each kind is written (tests begin so)."""
    for throttle in list(_ALL):
        throttle.last.clear()
        throttle.held.clear()


class LogThrottle:
    """One logger's throttled lines, by kind (a short fixed string of the caller's, never client text)."""

    __slots__ = ("__weakref__", "every", "held", "last", "logger")

    def __init__(self, logger: logging.Logger, every: float = EVERY_SECONDS) -> None:
        self.logger = logger
        self.every = every
        self.last: dict[str, float] = {}  # kind → time.monotonic() of its last line
        self.held: dict[str, int] = {}  # kind → lines held back since then
        _ALL.add(self)

    def log(self, level: int, kind: str, message: str, *args: object, exc_info: bool = False) -> bool:
        """Logs ``message % args`` unless a line of ``kind`` went out within ``every`` seconds (then
        counts it). True when the line was written."""
        now = time.monotonic()
        last = self.last.get(kind)
        if last is not None and now - last < self.every:
            self.held[kind] = self.held.get(kind, 0) + 1
            return False
        if len(self.last) >= MAX_KINDS and kind not in self.last:
            oldest = next(iter(self.last))
            self.last.pop(oldest)
            self.held.pop(oldest, None)
        self.last[kind] = now
        held = self.held.pop(kind, 0)
        if held:
            message += f" ({held} more like it in the last %.0f s)"
            args = (*args, now - (last or now))
        if exc_info:
            self.logger.log(level, message, *args, exc_info=True)
        else:
            self.logger.log(level, message, *args)
        return True

    def warning(self, kind: str, message: str, *args: object) -> bool:
        return self.log(logging.WARNING, kind, message, *args)

    def error(self, kind: str, message: str, *args: object) -> bool:
        return self.log(logging.ERROR, kind, message, *args)

    def exception(self, kind: str, message: str, *args: object) -> bool:
        """An error line with the traceback being handled (called in an ``except`` block)."""
        return self.log(logging.ERROR, kind, message, *args, exc_info=True)

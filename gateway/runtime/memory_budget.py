"""The process-wide budget for upstream answers held whole in memory.

A non-streamed answer is read whole before it is decoded. Each is capped on its own
(``adapters/http.py``), but concurrent ones add up without bound. Every target's reads draw on one
``MemoryBudget`` that the app builds from ``server.max_buffered_bytes``; a read that would pass it fails
instead, and its ``Share`` gives back what it held when the read ends, however it ends.

Only counting lives here: what the bytes are and what failing means is the reader's. One event loop
owns a budget, so there is no lock. What an answer becomes once decoded (its text, the client's
rendering of it) is not counted.
"""

from __future__ import annotations

from types import TracebackType


class MemoryBudget:
    """Bytes that reads in progress may hold, all together."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def share(self) -> Share:
        """A read's share, empty until it grows; use it as a context manager so that it is given back."""
        return Share(self)


class Share:
    """One read's part of a ``MemoryBudget``: grown as the bytes arrive, given back whole on exit."""

    __slots__ = ("_budget", "size")

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget = budget
        self.size = 0

    def grow(self, n: int) -> bool:
        """Take ``n`` more bytes; False (and nothing taken) when that would pass the budget."""
        budget = self._budget
        if budget.held + n > budget.limit:
            return False
        budget.held += n
        self.size += n
        return True

    def __enter__(self) -> Share:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._budget.held -= self.size
        self.size = 0

"""What a pool of replicas tells operators about its routing and its KV-cache events feed: the label
values (fixed sets, so nothing a client sends can become one) and the protocols ``backends/`` calls and
the web layer implements with Prometheus (``gateway/obs/routing.py``), so that backends need not know
the metrics module. What does not belong here: the replicas' scraped load (``upstream.ReplicaGauges``).

A routing decision is one request's first choice, named by the ``Source`` that made it (vLLM's KV-cache
events, the prefix index shared in Redis, or this process's own balancer) and its ``Outcome``:

* ``cached``: the replica chosen holds the prompt's leading blocks, as many as any available one (without
  Redis the events compare the eligible replicas only: their decisions are all ``cached``);
* ``yield``: another available replica holds more of them, but it was busier than the affinity slack;
* ``new``: no available replica holds the first block: a new prefix was placed;
* ``session``: a prompt without a full block went to its session's replica;
* ``no_affinity``: load alone decided (``round-robin``, ``least-loaded``, or nothing to be affine to).
"""

from __future__ import annotations

from typing import Literal, Protocol, get_args

Source = Literal["events", "shared", "local"]
Outcome = Literal["cached", "yield", "new", "session", "no_affinity"]
Cause = Literal["timeout", "error"]  # why the shared prefix index was not used: Redis slow, or failing
EventKind = Literal["stored", "removed", "cleared"]  # vLLM's BlockStored, BlockRemoved, AllBlocksCleared
ReplayStep = Literal["asked", "answered", "failed"]

SOURCES: tuple[Source, ...] = get_args(Source)
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
CAUSES: tuple[Cause, ...] = get_args(Cause)
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)
REPLAY_STEPS: tuple[ReplayStep, ...] = get_args(ReplayStep)


def affinity(depth: int, deepest: int) -> Outcome:
    """A prefix choice's outcome: ``depth`` leading blocks cached where it went, ``deepest`` the most
    any available replica holds."""
    if deepest > depth:
        return "yield"
    return "cached" if depth else "new"


class FeedReport(Protocol):
    """One replica's KV-cache events feed, as its subscriber sees it."""

    def connected(self, up: bool) -> None:
        """The publisher's socket connected (its view may be used) or was lost."""

    def heard(self) -> None:
        """A live batch arrived: the feed is not silent."""

    def applied(self, kind: EventKind) -> None:
        """One event of a batch the view took."""

    def gap(self) -> None:
        """Batches were missed (or one did not decode) and no replay recovered them: the view was emptied."""

    def replay(self, step: ReplayStep) -> None:
        """A replay was asked of the publisher's replay socket, answered to its end, or given up."""

    def held(self, blocks: int) -> None:
        """The blocks the view now holds."""


class PoolReport(Protocol):
    """One pool's routing: a call per request at most, on the request path."""

    def routed(self, source: Source, outcome: Outcome) -> None: ...

    def fell_back(self, cause: Cause) -> None:
        """A call to the shared prefix index failed or was too slow; the local index routes a moment."""

    def feed(self, replica: str) -> FeedReport:
        """The report of ``replica``'s events feed (its label: from the config, never from a request)."""
        ...


class NoReport:
    """Reports nothing: for pools built outside an app (tests, tools, benchmarks)."""

    def routed(self, source: Source, outcome: Outcome) -> None:
        pass

    def fell_back(self, cause: Cause) -> None:
        pass

    def feed(self, replica: str) -> NoReport:
        return self

    def connected(self, up: bool) -> None:
        pass

    def heard(self) -> None:
        pass

    def applied(self, kind: EventKind) -> None:
        pass

    def gap(self) -> None:
        pass

    def replay(self, step: ReplayStep) -> None:
        pass

    def held(self, blocks: int) -> None:
        pass


NO_REPORT = NoReport()

"""The record of one request (``RequestLog``), filled in as the pipeline runs; the app's ``Backlog``
that turns ended records into log lines and metrics in batches; and its count of requests in flight.

A request's line and metrics are not made when it ends but in batches: its record waits, with its
end time taken, for at most ``BACKLOG_SECONDS``, and a batch is done in one go before the metrics are
scraped and at shutdown too. Done one request at a time, right after the answer's write, this work ran
on caches the kernel's network path had just cooled (docs/performance.md). Keys, prompts and
completions never enter a record's line (a relayed stream's frames are held, uncounted, until it
ends: a cut stream is settled by their texts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.core.errors import GatewayError
from gateway.core.prompt import answer_tokens, delta_tokens, relayed_tokens
from gateway.core.response import Completion, Delta, Frame, StreamEvent, Token, UsageReport
from gateway.core.upstream import StreamProgress
from gateway.limits.budget_rules import money
from gateway.limits.plan import Plan
from gateway.obs import logs
from gateway.obs import metrics as m
from gateway.obs.tracing import RequestTrace
from gateway.policy.auth import Principal
from gateway.routing.dispatch import Attempt
from gateway.runtime.spend_config import MICROS
from gateway.runtime.throttle import LogThrottle

BACKLOG_SECONDS = 0.02
# Relayed frames a stream holds before counting them (``RequestLog.counted``): a cut stream is settled
# by their texts, and scanning every frame as it passes cost 27% of a burst stream's instructions.
HELD_BYTES = 256 * 1024
SeriesKey = tuple[str, str, str, str, str]

# Faults of ours a request can meet again and again: a traceback a period per kind, the rest counted.
FAULTS = LogThrottle(logging.getLogger("gateway"))


class _Series:
    """The tallies of one (bounded) label set, resolved once: ``labels()`` costs a lock and a dict
    walk per call, and a tally's update is a few plain additions (``gateway.obs.metrics``)."""

    __slots__ = (
        "completion_tokens",
        "duration",
        "inter_token",
        "overhead",
        "prompt_tokens",
        "requests",
        "spend",
        "ttft",
    )

    def __init__(self, owner: m.Tallies, dialect: str, model: str, provider: str, team: str, outcome: str) -> None:
        self.requests = m.CountTally(m.REQUESTS.labels(dialect, model, provider, team, outcome), owner)
        self.duration = m.histogram(m.DURATION.labels(dialect, model))
        self.overhead = m.histogram(m.OVERHEAD_SECONDS.labels(dialect))
        self.ttft = m.histogram(m.TTFT.labels(dialect, model))
        self.inter_token = m.histogram(m.INTER_TOKEN.labels(model))
        self.prompt_tokens = m.CountTally(m.TOKENS.labels(model, team, "prompt"), owner)
        self.completion_tokens = m.CountTally(m.TOKENS.labels(model, team, "completion"), owner)
        self.spend: m.CountTally | None = None  # the first priced request's (``spent``)

    def spent(self, owner: m.Tallies, team: str, model: str, currency: str) -> m.CountTally:
        """The spend tally, in millionths of the currency (whole units on flush)."""
        if self.spend is None:
            self.spend = m.CountTally(m.SPEND.labels(team, model, currency), owner, MICROS)
        return self.spend


class RequestLog:
    """The record of one request, filled in as the data path runs; ``emit`` writes its log line and
    its metrics (``gateway.obs.metrics``) in one place, after the answer has gone out."""

    __slots__ = (
        "attempt",
        "backlog",
        "budget_exceeded",
        "cache_write_tokens",
        "cached_tokens",
        "chunks",
        "completion_tokens",
        "cost",
        "dialect",
        "ended",
        "error",
        "frames",
        "held",
        "hint",
        "last_chunk",
        "lent",
        "logger",
        "model",
        "model_label",
        "most",
        "principal",
        "progress",
        "prompt_tokens",
        "rid",
        "started",
        "status",
        "streamed",
        "trace",
        "ttfb",
        "ttft",
        "unreported",
        "wall",
    )

    def __init__(
        self, backlog: Backlog, logger: logging.Logger, rid: str, dialect: str, trace: RequestTrace | None = None
    ) -> None:
        self.backlog = backlog
        self.logger = logger
        self.rid = rid
        self.dialect = dialect
        self.started = time.perf_counter()
        self.ended = 0.0  # set by ``close``
        self.wall = 0.0
        self.trace = trace  # the request's spans, when tracing is on
        self.attempt = Attempt(trace=trace)
        self.principal: Principal | None = None
        self.model: str | None = None
        self.model_label = "-"
        self.status = 200
        self.error: str | None = None
        self.hint = ""  # the operator's side of the error (``GatewayError.hint``): logged, never answered
        self.ttfb: float | None = None
        self.ttft: float | None = None
        self.last_chunk = 0.0
        self.chunks = 0
        self.streamed = 0  # tokens streamed, at least (a chunk each, or its ids)
        self.most = 0  # tokens streamed, at most (``prompt.relayed_tokens``, ``delta_tokens``)
        self.lent = 1  # a ``Token``'s bytes that are not its text (its shape's), less the one it adds
        self.frames: list[Frame] = []  # relayed frames not yet counted into ``most`` (``counted``)
        self.held = 0  # their bytes
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None  # of the prompt tokens, served from the upstream's cache
        self.cache_write_tokens: int | None = None  # of the prompt tokens, written to its prompt cache
        self.cost: int | None = None  # millionths of the currency, when priced (``Admission.release``)
        self.budget_exceeded: str | None = None  # the soft budget gone past: "team" or "key"
        self.progress: StreamProgress | None = None  # a stream's usage as its upstream last reported it
        self.unreported = False  # a whole answer came without usage: settled by upper bounds (``usage``)

    def first_byte(self) -> None:
        self.ttfb = time.perf_counter() - self.started
        if self.trace is not None:
            self.trace.first_token()

    def overhead(self) -> float:
        """Our own time so far: everything but the wait on upstreams (up to the first byte, for streams)."""
        upto = self.ttfb if self.ttfb is not None else (self.ended or time.perf_counter()) - self.started
        return max(0.0, upto - self.attempt.upstream_seconds)

    def observe(self, events: list[StreamEvent]) -> None:
        """One network read's events: they arrived together, so one clock reading serves them all."""
        now = 0.0
        for event in events:
            chunks = 1
            if type(event) is Token:  # one relayed chunk
                tokens = 1
                self.most += len(event.data) - self.lent
            elif isinstance(event, Frame):  # relayed: one or more chunks, each a one-line SSE event
                # not decoded: one token per chunk at least, and at most what its texts' bytes allow
                tokens = chunks = event.chunks
                self.frames.append(event)  # counted only if the stream is cut (``counted``)
                self.held += len(event)
                if self.held > HELD_BYTES:
                    self.counted()
                if event.shape is not None:  # the shape of the Tokens that follow it
                    self.lent = sum(map(len, event.shape)) - 1
            elif isinstance(event, Delta):
                tokens = len(event.token_ids) or 1
                self.most += delta_tokens(event)
            else:
                if isinstance(event, UsageReport):
                    self.cached_tokens = event.usage.cached_tokens
                    self.cache_write_tokens = event.usage.cache_write_tokens
                    self.prompt_tokens = event.usage.prompt_tokens
                    self.completion_tokens = event.usage.completion_tokens
                elif self.trace is not None:
                    self.trace.event(event)  # the answer's model and finish reasons
                continue
            if not now:
                now = time.perf_counter()
                if self.ttft is None:
                    self.ttft = now - self.started
                self.last_chunk = now
            self.chunks += chunks
            self.streamed += tokens

    def token(self, size: int) -> None:
        """``observe`` for a read that was one relayed chunk (a ``Token`` of ``size`` bytes)."""
        self.last_chunk = now = time.perf_counter()
        if self.ttft is None:  # (a Token follows the frame that lent it its shape: not in practice)
            self.ttft = now - self.started
        self.chunks += 1
        self.streamed += 1
        self.most += size - self.lent

    def counted(self) -> int:
        """``most``, the frames held counted into it: a scan a stream pays only when it is cut, or
        once per ``HELD_BYTES`` relayed (the memory a stream may hold for it)."""
        if self.frames:
            # one scan of them joined: each frame holds whole events, so no text spans two
            self.most += relayed_tokens(b"".join(self.frames), sum(f.chunks for f in self.frames))
            self.frames.clear()
            self.held = 0
        return self.most

    def completed(self, completion: Completion) -> None:
        if self.trace is not None:
            self.trace.completed(completion)
        if completion.usage is not None:
            self.prompt_tokens = completion.usage.prompt_tokens
            self.completion_tokens = completion.usage.completion_tokens
            self.cached_tokens = completion.usage.cached_tokens
            self.cache_write_tokens = completion.usage.cache_write_tokens
        else:  # no count of its own: charged its bounds, as a cut stream is, never nothing
            self.unreported = True
            self.most = answer_tokens(completion)

    def usage(self, plan: Plan) -> tuple[int | None, int | None]:
        """Tokens to settle: the upstream's own count. For a stream cut short (client gone, upstream
        broke off) or an answer whose upstream reported no usage, upper bounds: the prompt's real
        count where the upstream reported one as it went, else its estimate; and the larger of the
        upstream's count so far and the most the texts can hold (never past the completion's worst
        case): an upstream's count may be its first event's (Anthropic's), and a chunk may carry
        several tokens. No answer and nothing streamed: what its calls reported before it failed
        (a fan-out's calls that answered), else nothing."""
        if self.completion_tokens is not None:
            return self.prompt_tokens, self.completion_tokens
        seen = self.progress.usage if self.progress is not None else None
        if not (self.streamed or self.unreported):
            if seen is None:
                return self.prompt_tokens, None
            self.cached_tokens, self.cache_write_tokens = seen.cached_tokens, seen.cache_write_tokens
            return seen.prompt_tokens, seen.completion_tokens
        worst = plan.estimate - plan.prompt_estimate  # max_tokens for every choice (0: not planned)
        most = self.counted()
        completion = max(self.streamed, min(most, worst) if worst > 0 else most)
        if seen is not None and seen.prompt_tokens:
            if self.cached_tokens is None:
                self.cached_tokens, self.cache_write_tokens = seen.cached_tokens, seen.cache_write_tokens
            return seen.prompt_tokens, max(seen.completion_tokens, completion)
        return plan.prompt_estimate, completion

    def failed(self, err: GatewayError) -> None:
        if self.ttfb is None:
            self.status = err.status
        self.error = err.code
        self.hint = err.hint

    def gone(self) -> None:
        self.error = "client_gone"

    def close(self) -> None:
        """The request is over: its line and metrics are made with the next batch (``Backlog``)."""
        self.ended = time.perf_counter()
        self.wall = time.time()
        self.backlog.add(self)
        if self.trace is not None:
            self.trace.end(self._span_fields(), self.status, self.error)

    def _span_fields(self) -> dict[str, object]:
        """What the request's server span says of it: GenAI conventions' names where they have one."""
        return {
            "gateway.request_id": self.rid,
            "gateway.dialect": self.dialect,
            "gateway.team": self.principal.team if self.principal else None,
            "gateway.model": self.model_label,
            "gen_ai.request.model": self.model,
            "gen_ai.provider.name": self.attempt.provider,
            "gateway.target": self.attempt.target,
            "gateway.attempts": self.attempt.tries,
            "gen_ai.usage.input_tokens": self.prompt_tokens,
            "gen_ai.usage.output_tokens": self.completion_tokens,
        }

    def emit(self) -> None:
        """The log line and the metrics, now."""
        duration = (self.ended or time.perf_counter()) - self.started
        overhead = self.overhead()
        self._metrics(duration, overhead)
        if not self.logger.isEnabledFor(logging.INFO):
            return
        who, attempt = self.principal, self.attempt
        fields: dict[str, object] = {
            "ts": self.wall or time.time(),  # the writer thread makes it ISO 8601 (``logs.json_line``)
            "level": "info",
            "logger": logs.ACCESS_LOGGER,
            "event": "request",
            "request_id": self.rid,
            "dialect": self.dialect,
            "team": who.team if who else None,
            "key_id": who.key_id if who else None,
            "model": self.model,
            "target": attempt.target,
            "provider": attempt.provider,
            "tries": attempt.tries,
            "status": self.status,
            "error": self.error,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "duration_ms": round(duration * 1000, 3),
            "ttfb_ms": round(self.ttfb * 1000, 3) if self.ttfb is not None else None,
            "overhead_ms": round(overhead * 1000, 3),
        }
        if self.hint:
            fields["hint"] = self.hint
        if self.cached_tokens:
            fields["cached_tokens"] = self.cached_tokens
        if self.cache_write_tokens:
            fields["cache_write_tokens"] = self.cache_write_tokens
        if self.cost is not None:  # exact: the same millionths the spend counters add up
            fields["cost"] = money(self.cost)
            fields["currency"] = self.backlog.currency
        if attempt.dropped or attempt.resumed:  # a continuation's target's drops too, each named once
            dropped = [*attempt.dropped, *(f for r in attempt.resumed for f in r.dropped)]
            if dropped:
                fields["dropped"] = list(dict.fromkeys(f.value for f in dropped))
        if attempt.failed:  # every failed try, fallbacks included: which target, and how
            fields["failures"] = [f"{target}: {code}" for target, code in attempt.failed]
        if attempt.resumed:  # each continuation: where it broke, why, and where it went on
            fields["resumes"] = [f"{r.broken} -> {r.target}: {r.cause} after {r.tokens}" for r in attempt.resumed]
        if not logs.put_line(fields):
            self.logger.info("request", extra={"fields": fields})

    def _metrics(self, duration: float, overhead: float) -> None:
        model, team = self.model_label, self.principal.team if self.principal else "-"
        provider = self.attempt.provider or "-"
        outcome = m.outcome(self.status, self.error)
        key = (self.dialect, model, provider, team, outcome)
        series = self.backlog.series.get(key)
        if series is None:
            series = self.backlog.series[key] = _Series(self.backlog.tallies, *key)
        series.requests.n += 1
        series.duration.observe(duration)
        series.overhead.observe(overhead)
        if self.ttft is not None:
            series.ttft.observe(self.ttft)
            if self.chunks > 1:
                series.inter_token.observe((self.last_chunk - self.started - self.ttft) / (self.chunks - 1))
        if self.prompt_tokens is not None:
            series.prompt_tokens.n += self.prompt_tokens
        if self.completion_tokens is not None:
            series.completion_tokens.n += self.completion_tokens
        if self.cost:
            series.spent(self.backlog.tallies, team, model, self.backlog.currency).n += self.cost
        attempt = self.attempt
        if attempt.tries > 1 or attempt.cooled or attempt.failed or attempt.resumed or attempt.dropped:
            _tried(attempt, model)  # rare: one test for the requests that went at once


def _tried(attempt: Attempt, model: str) -> None:
    """The metrics of a request's tries beyond one plain success: fallbacks, failures, resumes."""
    if attempt.tries > 1:
        m.RETRIES.labels(model).inc(attempt.tries - 1)
    for target in attempt.cooled:
        m.COOLDOWNS.labels(target).inc()
    for target, code in attempt.failed:
        m.UPSTREAM_FAILURES.labels(target, code).inc()
    for r in attempt.resumed:
        m.RESUMES.labels(r.broken, r.cause).inc()
        m.RESUME_LOST.labels(r.broken).observe(r.lost)
    first = attempt.resumed[0].broken if attempt.resumed else attempt.target  # the one that answered first
    for feature in attempt.dropped:
        m.DROPPED.labels(first or "-", feature.value).inc()
    for r in attempt.resumed:  # each continuation's target, for what it went without
        for feature in r.dropped:
            m.DROPPED.labels(r.target, feature.value).inc()


class Backlog:
    """Ended requests waiting for their lines and metrics, done in one batch per ``BACKLOG_SECONDS``
    (one loop timer per batch, armed by its first request), or sooner by ``drain``."""

    __slots__ = ("currency", "items", "series", "tallies", "timer")

    def __init__(self) -> None:
        self.currency = "USD"  # of the requests' costs (config ``spend.currency``, set by the app)
        self.items: list[RequestLog] = []
        self.series: dict[SeriesKey, _Series] = {}  # resolved metric children, by label set
        self.tallies = m.Tallies()  # theirs, flushed by the app that owns this backlog
        self.timer: asyncio.TimerHandle | None = None

    def add(self, log: RequestLog) -> None:
        self.items.append(log)
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(BACKLOG_SECONDS, self.drain)

    def drain(self) -> None:
        """Every waiting request's line and metrics, now (before a scrape, at shutdown)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        items, self.items = self.items, []
        for log in items:
            try:
                log.emit()
            except Exception:  # one bad record must not lose the batch's other lines
                FAULTS.exception("unlogged", "request %s could not be logged", log.rid)


class InFlight:
    """Requests in flight in this app: one level per dialect (shared by the routes that answer in it:
    a tally per route would set the one gauge child from each in turn), and the tasks serving them,
    which a drain waits for and, at its end, cuts."""

    __slots__ = ("idle", "levels", "tallies", "tasks")

    def __init__(self) -> None:
        self.levels: dict[str, m.LevelTally] = {}
        self.tallies = m.Tallies()
        self.tasks: set[asyncio.Task[object]] = set()
        self.idle: asyncio.Event | None = None  # made by a drain; set when the last request ends

    def began(self, task: asyncio.Task[object]) -> None:
        self.tasks.add(task)

    def ended(self, task: asyncio.Task[object]) -> None:
        self.tasks.discard(task)
        if not self.tasks and self.idle is not None:
            self.idle.set()

    async def drain(self, seconds: float, cut_seconds: float) -> int:
        """Wait up to ``seconds`` for the requests in flight to end; then cancel the rest (each ends
        in its dialect's error, ``web.pipeline``) and give them ``cut_seconds`` to say so. Returns
        how many were cut."""
        if not self.tasks:
            return 0
        self.idle = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), seconds)
        cut = list(self.tasks)
        for task in cut:
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), cut_seconds)
        return len(cut)

    def level(self, dialect: str) -> m.LevelTally:
        if dialect not in self.levels:
            self.levels[dialect] = m.LevelTally(m.IN_FLIGHT.labels(dialect), self.tallies)
        return self.levels[dialect]

    def busy(self) -> bool:
        """Other requests are in flight. A split read's first events then wait for the rest of their
        read (``Then.REST``, ``gateway.web.relay``), to go in one send: under load every send costs
        CPU that other requests wait for, while a lone request's first token goes out at once
        (docs/performance.md)."""
        return len(self.tasks) > 1  # the tasks serving requests, counted once, not summed over dialects

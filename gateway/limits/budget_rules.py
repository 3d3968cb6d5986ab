"""Budget rules: money and tokens per team and per key over calendar periods (day, week from Monday,
month, in the configured time zone) or a rolling window, kept exact across replicas as one more
limit kind (``bud``) of the same atomic admission (``scripts.ADMIT``) and settlement.

A budget is a Redis hash per team (``llmgw:{team}:budget``) or key (``...:key:<id>:budget``) with a
field per period (or per slice of a rolling window) and unit: ``<start>:m`` in millionths of the
currency, ``<start>:t`` in tokens. Admission adds the request's worst case to the current field if the
fields of the window leave room for it; settlement adds (real - reserved) to the same field, so a
request is charged to the period it was admitted in. The window's fields are computed here, on this
process's clock (Redis has no time zones): replicas' clocks agree to well under a period.

Sans-IO: no Redis here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from gateway.core.errors import RateLimited
from gateway.core.records import record
from gateway.runtime.spend_config import MICROS, Budget

SLICES = 12  # a rolling window is summed from this many slices: it spans between 11/12 and all of its length
PRUNE_AFTER = 64  # fields a budget hash keeps before the admission that finds more prunes the old ones


@record
class Window:
    """The fields of one budget hash that make up its current window, for one unit (``m`` or ``t``)."""

    fields: tuple[str, ...]  # summed: what the window has spent and reserved
    add: str  # where this request's reservation (and later its correction) goes
    oldest: int  # fields of periods before this start are pruned
    ttl: int  # seconds the hash outlives its last write
    reset: float  # when room comes back: the period's end (rolling: when the oldest slice leaves)


def midnight(day: date, zone: ZoneInfo) -> int:
    """The instant ``day`` begins in ``zone``. Where clocks skip midnight, the first instant of the day
    (zoneinfo reads a skipped wall time with the offset before the change, which lands on it)."""
    return int(datetime(day.year, day.month, day.day, tzinfo=zone).timestamp())


def calendar(kind: str, zone: ZoneInfo, now: float) -> tuple[int, int]:
    """The [start, end) of the day, week (Monday first) or month holding ``now``, in epoch seconds."""
    today = datetime.fromtimestamp(now, zone).date()
    if kind == "day":
        first, after = today, today + timedelta(days=1)
    elif kind == "week":
        first = today - timedelta(days=today.weekday())
        after = first + timedelta(days=7)
    else:
        first = today.replace(day=1)
        after = (first + timedelta(days=32)).replace(day=1)
    return midnight(first, zone), midnight(after, zone)


def rolling(seconds: int, now: float) -> tuple[list[int], int]:
    """A rolling window's slice starts, newest first, and the slice length."""
    length = max(1, seconds // SLICES)
    current = int(now // length) * length
    return [current - k * length for k in range(SLICES)], length


@dataclass(frozen=True, slots=True, eq=False)
class Period:
    kind: str  # day | week | month | rolling
    zone: ZoneInfo
    seconds: int = 0  # the rolling window's length
    _current: dict[str, tuple[float, Window]] = field(default_factory=dict)  # per unit: valid until, window

    def window(self, unit: str, now: float) -> Window:
        """The current window of ``unit`` (``m`` or ``t``), made once per period or slice."""
        known = self._current.get(unit)
        if known is not None and now < known[0]:
            return known[1]
        if self.kind == "rolling":
            starts, length = rolling(self.seconds, now)
            until = float(starts[0] + length)  # the oldest slice stops counting then
            fields = tuple(f"{s}:{unit}" for s in starts)
            win = Window(fields, fields[0], starts[-1], self.seconds + 2 * length, until)
        else:
            start, end = calendar(self.kind, self.zone, now)
            win = Window((f"{start}:{unit}",), f"{start}:{unit}", start, end - start + 3600, float(end))
            until = float(end)
        self._current[unit] = (until, win)
        return win


@record
class Rule:
    """One budget in one unit, as a limit: its period, whether it refuses, how it is named."""

    unit: str  # "m": millionths of the currency; "t": tokens
    period: Period
    soft: bool
    currency: str

    def amount(self, value: int) -> str:
        """``value`` in the rule's unit, for messages and headers."""
        if self.unit == "t":
            return f"{value} tokens"
        return f"{money(value)} {self.currency}"

    @property
    def per(self) -> str:
        return f"per {self.period.seconds} s rolling" if self.period.kind == "rolling" else f"per {self.period.kind}"


def money(micros: int) -> str:
    """Millionths of a currency as a decimal string, exactly: 1234567 → ``1.234567``."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), MICROS)
    return f"{sign}{whole}.{frac:06d}"


def rules(budget: Budget | None, zone: ZoneInfo, currency: str) -> list[tuple[Rule, int]]:
    """A configured budget as its rules and their limits (money in millionths)."""
    if budget is None:
        return []
    period = Period(budget.period, zone, budget.window_seconds or 0)
    soft = budget.mode == "soft"
    out: list[tuple[Rule, int]] = []
    if budget.amount is not None:
        out.append((Rule("m", period, soft, currency), int(budget.amount * MICROS)))
    if budget.tokens is not None:
        out.append((Rule("t", period, soft, currency), budget.tokens))
    return out


def iso(moment: float, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(moment, zone).isoformat(timespec="seconds")


def refusal(scope: str, rule: Rule, limit: int, remaining: int, want: int, reset: float, now: float) -> RateLimited:
    """The 429 of a request whose worst case (``want``) does not fit: names the budget and when it
    resets, or says the worst case exceeds the whole budget (waiting would not help)."""
    when = iso(reset, rule.period.zone)
    left = max(0, remaining)
    if want > limit:
        err = RateLimited(
            f"this request's worst case ({rule.amount(want)}) exceeds the {scope}'s whole budget of "
            f"{rule.amount(limit)} {rule.per}: lower max_tokens"
        )
    else:
        err = RateLimited(
            f"the {scope}'s budget of {rule.amount(limit)} {rule.per} cannot cover this request's worst "
            f"case ({rule.amount(left)} left); it resets at {when}",
            retry_after=max(0.0, math.ceil(reset - now)),
        )
    err.headers = {"X-Budget-Remaining": rule.amount(left).split(" ")[0], "X-Budget-Reset": when}
    return err

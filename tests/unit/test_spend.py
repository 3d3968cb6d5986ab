"""Prices and budget periods, as plain arithmetic: costs in exact millionths, calendar periods that
begin at local midnight in the configured zone (across DST changes, month ends, a skipped day),
rolling windows, and the budget config's checks."""

from __future__ import annotations

import itertools
import logging
import math
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.limits.budget_rules import SLICES, calendar, midnight, money, rolling, rules
from gateway.limits.prices import PriceTable, Rate
from gateway.runtime.config import ConfigError, parse_config
from gateway.runtime.spend_config import Price, SpendSettings

# Zones with the awkward cases: DST at 02:00 (Paris), at midnight (Santiago), by 30 minutes (Lord
# Howe), a +05:30 offset (Kolkata), a whole day skipped (Apia, 2011-12-30), and none at all (UTC).
ZONES = ["UTC", "Europe/Paris", "America/Santiago", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Apia"]
MOMENTS = st.integers(min_value=946684800, max_value=2208988800)  # 2000 to 2040


def local_date(moment: float, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(moment, zone)


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(["day", "week", "month"]), zone=st.sampled_from(ZONES), now=MOMENTS)
def test_a_calendar_period_holds_now_and_begins_where_the_local_date_turns(kind: str, zone: str, now: int) -> None:
    tz = ZoneInfo(zone)
    start, end = calendar(kind, tz, now)
    assert start <= now < end
    # the local date changes exactly at both bounds: the period begins and ends at a local midnight
    # (or, where midnight is skipped, at the first instant of the day)
    for bound in (start, end):
        assert local_date(bound - 1, tz).date() < local_date(bound, tz).date()
    first = local_date(start, tz).date()
    if kind == "week":
        assert first.weekday() == 0 or zone == "Pacific/Apia"
    if kind == "month":
        assert first.day == 1
    # periods tile time: the next one begins where this one ends
    assert calendar(kind, tz, end)[0] == end


def test_days_across_dst_last_23_and_25_hours_in_paris() -> None:
    paris = ZoneInfo("Europe/Paris")
    spring = datetime(2026, 3, 29, 12, tzinfo=paris).timestamp()
    autumn = datetime(2026, 10, 25, 12, tzinfo=paris).timestamp()
    assert [e - s for s, e in (calendar("day", paris, spring), calendar("day", paris, autumn))] == [
        23 * 3600,
        25 * 3600,
    ]
    start, end = calendar("month", paris, spring)
    assert (end - start) == 31 * 86400 - 3600  # March, one hour short


@pytest.mark.parametrize(
    ("day", "days"), [((2028, 2, 10), 29), ((2027, 2, 28), 28), ((2026, 1, 31), 31), ((2026, 12, 31), 31)]
)
def test_month_ends(day: tuple[int, int, int], days: int) -> None:
    utc = ZoneInfo("UTC")
    start, end = calendar("month", utc, datetime(*day, 23, 59, 59, tzinfo=utc).timestamp())
    assert (end - start) == days * 86400


def test_a_skipped_day_ends_the_day_before_at_once() -> None:
    apia = ZoneInfo("Pacific/Apia")  # 2011-12-30 never happened there
    start, end = calendar("day", apia, datetime(2011, 12, 29, 12, tzinfo=apia).timestamp())
    assert local_date(end, apia).date().isoformat() == "2011-12-31"
    assert end == midnight(datetime(2011, 12, 31).date(), apia)
    assert end - start == 86400


@given(seconds=st.integers(min_value=60, max_value=40 * 86400), now=MOMENTS)
def test_a_rolling_window_is_its_slices(seconds: int, now: int) -> None:
    starts, length = rolling(seconds, now)
    assert len(starts) == SLICES and starts[0] <= now < starts[0] + length
    assert all(a - b == length for a, b in itertools.pairwise(starts))
    assert seconds - SLICES < starts[0] + length - starts[-1] <= seconds  # the slices span the window, give or take


@given(
    prompt=st.integers(0, 10**9),
    cached=st.integers(-5, 10**9),
    completion=st.integers(0, 10**9),
    cents=st.tuples(*[st.integers(0, 10**7)] * 3),
)
def test_a_cost_is_the_exact_sum_rounded_up_to_a_millionth(
    prompt: int, cached: int, completion: int, cents: tuple[int, int, int]
) -> None:
    rate = Rate(*(Decimal(c) / 1000 for c in cents))  # prices per million, to a thousandth
    got = rate.cost(prompt, cached, completion)
    served = max(0, min(cached, prompt))
    exact = (Decimal(prompt - served) * rate.input + Decimal(served) * rate.cached_input) + completion * rate.output
    assert got - 1 < exact <= got


def test_prices_per_million_are_millionths_per_token() -> None:
    rate = Rate.of(Price(model="m", input=Decimal("2.50"), cached_input=Decimal("1.25"), output=Decimal(10)))
    assert rate.cost(1_000_000, 0, 0) == 2_500_000  # 2.50 for a million prompt tokens
    assert rate.cost(1000, 400, 100) == 600 * 2.5 + 400 * 1.25 + 100 * 10
    assert rate.cost(1, 0, 0) == 3  # 2.5 millionths, rounded up
    assert money(2_500_000) == "2.500000" and money(7) == "0.000007" and money(-1_500_000) == "-1.500000"


def test_a_target_price_wins_and_a_missing_price_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    table = PriceTable.of(
        SpendSettings(
            prices=(
                Price(model="m", input=Decimal(1), output=Decimal(2)),
                Price(model="m", target="dear", input=Decimal(3), output=Decimal(1)),
            )
        )
    )
    assert table.rate("m", "cheap") == Rate(Decimal(1), Decimal(1), Decimal(2))
    assert table.rate("m", "dear") == Rate(Decimal(3), Decimal(3), Decimal(1))
    assert table.worst("m", ("cheap", "dear")) == Rate(Decimal(3), Decimal(3), Decimal(2))
    with caplog.at_level(logging.WARNING, "gateway.limits"):
        assert table.rate("other", "t") is None
        assert table.rate("other", "t") is None
    assert [r.getMessage() for r in caplog.records] == [
        "no price for model 'other' on target 't': its spend is not counted"
    ]
    assert table.unpriced == {("other", "t")}
    assert table.worst("other", ("t",)) is None


@pytest.mark.parametrize(
    ("budget", "error"),
    [
        ({"amount": "0.0000001"}, "at most 6 decimals"),
        ({"period": "day"}, "give 'amount', 'tokens' or both"),
        ({"tokens": 5, "period": "rolling"}, "'window_seconds' is given with period: rolling"),
        ({"tokens": 5, "window_seconds": 3600}, "'window_seconds' is given with period: rolling"),
        ({"tokens": 5, "period": "year"}, "teams['t'].budget.period"),
    ],
)
def test_a_budget_that_cannot_work_is_refused_by_name(budget: dict[str, object], error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("[", r"\[").replace("]", r"\]")):
        parse_config({"teams": [{"id": "t", "budget": budget}]})


def test_a_spend_section_is_checked() -> None:
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus'"):
        parse_config({"spend": {"time_zone": "Mars/Olympus"}})
    twice = [{"model": "local", "input": 1, "output": 1}] * 2
    with pytest.raises(ConfigError, match="priced twice"):
        parse_config({"spend": {"prices": twice}})


@pytest.mark.parametrize(
    ("price", "error"),
    [
        ({"model": "chat"}, "spend.prices[0].model: 'chat' is an alias: price the model's name, 'm'"),
        ({"model": "gpt"}, "spend.prices[0].model: unknown model 'gpt' (known: m, local, openai/*)"),
        (
            {"model": "m", "target": "b"},
            "spend.prices[0].target: model 'm' has no target 'b' (its targets: a, openai:m)",
        ),
    ],
)
def test_a_price_that_could_never_apply_is_refused(price: dict[str, str], error: str) -> None:
    targets = [
        {"provider": "openai", "base_url": "http://x", "name": "a"},
        {"provider": "openai", "base_url": "http://y"},
    ]
    data = {
        "models": [{"name": "m", "aliases": ["chat"], "targets": targets}],
        "vendors": {"openai": {"provider": "openai", "base_url": "http://z"}},
        "spend": {"prices": [{**price, "input": 1, "output": 2}]},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert str(caught.value) == f"<config>: {error}"
    for fine in ({"model": "m", "target": "openai:m"}, {"model": "openai/*"}, {"model": "local"}):
        parse_config({**data, "spend": {"prices": [{**fine, "input": 1, "output": 2}]}})


@given(
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.decimals(0, 100, places=3),
    st.decimals(0, 100, places=3) | st.none(),
)
def test_an_embeddings_request_costs_its_input_at_the_embedding_rate(
    prompt: int, completion: int, input_price: Decimal, embedding: Decimal | None
) -> None:
    price = Price(model="e", input=input_price, output=Decimal(9), cached_input=Decimal(0), embedding=embedding)
    rate = Rate.of(price).for_embeddings()
    each = input_price if embedding is None else embedding
    # every input token at the embedding price (its default: input); no cache discount, no output
    assert rate.cost(prompt, prompt, completion) == math.ceil(prompt * each)


def test_the_reservation_of_an_embeddings_request_uses_the_dearest_embedding_rate() -> None:
    from gateway.core.request import InternalRequest, Operation
    from gateway.limits.plan import LimitValues, layout, planned

    table = PriceTable.of(
        SpendSettings(
            prices=(
                Price(model="e", target="a", input=Decimal(100), output=Decimal(100), embedding=Decimal(2)),
                Price(model="e", target="b", input=Decimal(100), output=Decimal(100), embedding=Decimal(3)),
            )
        )
    )
    worst = table.worst("e", ("a", "b"))
    assert worst is not None and worst.embedding == Decimal(3)
    request = InternalRequest(operation=Operation.EMBEDDING, model="e", prompts=("word " * 40,))
    from gateway.runtime.spend_config import Budget

    budget = rules(Budget(amount=Decimal(1000), period="day"), ZoneInfo("UTC"), "EUR")
    limits = layout("t", "k", LimitValues(), LimitValues(), tuple(budget))
    plan = planned("t", "k", limits, request, "lease", worst)
    assert 0 < plan.cost_estimate == plan.prompt_estimate * 3


def test_cache_reads_and_writes_have_their_own_prices() -> None:
    """``cache_read`` and ``cache_write`` each price their own tokens; ``cached_input`` is cache_read's
    earlier name, and giving both is refused by name."""
    price = Price(
        model="c", input=Decimal(3), cache_read=Decimal("0.3"), cache_write=Decimal("3.75"), output=Decimal(15)
    )
    rate = Rate.of(price)
    # 1000 prompt tokens: 600 read from the cache, 300 written to it, 100 fresh; 10 completion tokens
    assert rate.cost(1000, 600, 10, written=300) == 100 * 3 + 600 * Decimal("0.3") + 300 * Decimal("3.75") + 150
    assert Rate.of(Price(model="c", input=Decimal(3), cached_input=Decimal(1), output=Decimal(0))).cost(4, 4, 0) == 4
    assert Rate.of(Price(model="c", input=Decimal(3), output=Decimal(0))).cost(4, 2, 0, written=2) == 12
    with pytest.raises(ValueError, match="'cache_read' or its earlier name 'cached_input'"):
        Price(model="c", input=Decimal(3), cache_read=Decimal(1), cached_input=Decimal(1), output=Decimal(0))


@given(
    words=st.integers(0, 2000),
    most=st.integers(1, 10**5),
    split=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    prices=st.tuples(*[st.integers(0, 10**5)] * 4),
)
def test_the_worst_case_reserved_bounds_every_split_of_the_prompt(
    words: int, most: int, split: tuple[float, float], prices: tuple[int, int, int, int]
) -> None:
    """However the target reports the prompt (read from its cache, written to it, neither), its cost is
    within the worst case a budget reserves: a write dearer than a fresh token (Anthropic's 1.25 times)
    or a read priced above it is reserved at that price, or a hard budget is passed."""
    from gateway.core.request import InternalRequest, Operation, Sampling
    from gateway.limits.plan import LimitValues, layout, planned
    from gateway.runtime.spend_config import Budget

    each, read, write, out = (Decimal(p) / 100 for p in prices)
    rate = Rate(each, read, out, cache_write=write)
    budget = rules(Budget(amount=Decimal(10**9), period="day"), ZoneInfo("UTC"), "EUR")
    prompt = ("word " * words,)
    request = InternalRequest(Operation.COMPLETION, model="m", prompts=prompt, sampling=Sampling(max_tokens=most))
    plan = planned("t", "k", layout("t", "k", LimitValues(), LimitValues(), tuple(budget)), request, "l", rate)
    tokens = plan.prompt_estimate  # the prompt at its bound: every token of it read, written or fresh
    cached = int(tokens * split[0])
    written = int((tokens - cached) * split[1])
    for c, w in ((cached, written), (tokens, 0), (0, tokens), (0, 0)):
        assert rate.cost(tokens, c, most, w) <= plan.cost_estimate

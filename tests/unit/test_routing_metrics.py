"""A pool's routing decisions as metrics (``gateway.obs.routing`` behind ``backends.pool.balance``): each
outcome lands on its own series, and only configured names and fixed words ever become labels."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from backends.pool.balance import Balancer, ReplicaState
from backends.pool.prefix_index import SharedRouter
from gateway.core.pool_report import OUTCOMES, SOURCES, affinity
from gateway.core.request import InternalRequest, Operation
from gateway.obs import metrics
from gateway.obs.routing import PoolTallies, Routing
from gateway.runtime.config import Balance

NOW = 1000.0
SYSTEM = "You are a terse assistant. " * 4  # several 16-character blocks
ROUTING_METRICS = ("gateway_routing_decisions_total", "gateway_shared_prefix_fallbacks_total")


def pool(routing: Routing, n: int = 3, **balance: object) -> Balancer:
    """A pool of its own name: the registry is the process's, shared by every test."""
    states = [ReplicaState(f"http://10.0.0.{i}:8000/v1", f"r{i}") for i in range(n)]
    settings = Balance.model_validate({"prefix_block_chars": 16, **balance})
    return Balancer(states, settings, routing.pool(f"pool-{uuid.uuid4().hex[:8]}"))


def completion(prompt: str, user: str | None = None) -> InternalRequest:
    return InternalRequest(Operation.COMPLETION, model="m", prompts=(prompt,), user=user)


def decisions(routing: Routing, b: Balancer) -> dict[tuple[str, str], float]:
    """The pool's non-zero decision counts by (source, outcome), as a scrape shows them."""
    metrics.flush(routing.tallies)
    assert isinstance(b.report, PoolTallies)
    target = b.report.target
    out = {}
    for s in SOURCES:
        for o in OUTCOMES:
            value = REGISTRY.get_sample_value(
                "gateway_routing_decisions_total", {"target": target, "source": s, "outcome": o}
            )
            assert value is not None  # every child exists from the start
            if value:
                out[s, o] = value
    return out


def route(b: Balancer, prompt: str, session: str | None = None) -> int:
    order, hashes = b.order(completion(prompt), session, NOW)
    b.record(hashes, order[0])
    return order[0]


def test_the_outcome_of_a_choice() -> None:
    assert [affinity(0, 0), affinity(2, 2), affinity(1, 3), affinity(0, 2)] == ["new", "cached", "yield", "yield"]


def test_each_local_outcome_counts_on_its_own_series() -> None:
    routing = Routing()
    b = pool(routing, affinity_slack=1)
    home = route(b, SYSTEM + "first?")
    assert decisions(routing, b) == {("local", "new"): 1}
    assert route(b, SYSTEM + "second?") == home
    assert decisions(routing, b) == {("local", "new"): 1, ("local", "cached"): 1}
    b.replicas[home].in_flight = 5  # beyond the slack: the prefix is passed over for load
    assert route(b, SYSTEM + "third?") != home
    assert decisions(routing, b) == {("local", "new"): 1, ("local", "cached"): 1, ("local", "yield"): 1}
    b.replicas[home].in_flight = 0
    route(b, "short", "a session")  # no full block: the session decides
    route(b, "short")  # nor a session: load alone
    assert decisions(routing, b) == {
        ("local", "new"): 1,
        ("local", "cached"): 1,
        ("local", "yield"): 1,
        ("local", "session"): 1,
        ("local", "no_affinity"): 1,
    }


def test_strategies_without_affinity_count_as_such() -> None:
    routing = Routing()
    for strategy in ("round-robin", "least-loaded"):
        b = pool(routing, strategy=strategy)
        for _ in range(3):
            route(b, SYSTEM + "same?", "a session")
        assert decisions(routing, b) == {("local", "no_affinity"): 3}


def test_a_pool_with_no_replica_up_still_counts_its_requests() -> None:
    routing = Routing()
    b = pool(routing, n=2)
    for state in b.replicas:
        state.healthy = False
    route(b, SYSTEM + "anyone?")
    assert decisions(routing, b) == {("local", "no_affinity"): 1}


def test_a_pool_rebuilt_by_a_reload_keeps_its_series() -> None:
    routing = Routing()
    first = routing.pool("same-name")
    assert routing.pool("same-name") is first and first.feed("r0") is first.feed("r0")


def routing_labels() -> set[str]:
    """Every label value of the routing metrics in the process's registry."""
    return {
        value
        for family in REGISTRY.collect()
        if family.name + "_total" in ROUTING_METRICS
        for sample in family.samples
        for value in sample.labels.values()
    }


hostile = st.text(min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(sessions=st.lists(st.one_of(st.none(), hostile), min_size=1, max_size=8), users=st.lists(hostile, max_size=4))
def test_no_request_string_becomes_a_label(sessions: list[str | None], users: list[str]) -> None:
    """Sessions, users, prompts and model names, whatever they hold, move counts between the fixed
    series of the pool's own name: the routing metrics' label values stay those they were."""
    routing = Routing()
    b = pool(routing)
    before = routing_labels()
    for i, session in enumerate(sessions):
        user = users[i % len(users)] if users else None
        prompt = (session or "") * 3 + SYSTEM
        request = InternalRequest(Operation.COMPLETION, model=prompt, prompts=(prompt,), user=user)
        order, hashes = b.order(request, session, NOW)
        b.record(hashes, order[0])
    assert sum(decisions(routing, b).values()) == len(sessions)
    assert routing_labels() == before


class FailingRedis:
    """A Redis client whose every script call fails with ``exc``."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def register_script(self, _source: str) -> Callable[..., Awaitable[object]]:
        async def call(**_: object) -> object:
            raise self.exc

        return call


@pytest.mark.parametrize(
    ("exc", "cause"),
    [
        (TimeoutError(), "timeout"),  # ours: shared_timeout_ms
        (RedisTimeoutError("Timeout reading from socket"), "timeout"),  # the client's own: redis.timeout_ms
        (RedisConnectionError("Connection refused"), "error"),
    ],
)
async def test_a_shared_index_fallback_is_counted_by_its_cause(exc: Exception, cause: str) -> None:
    routing = Routing()
    b = pool(routing, strategy="kv-shared")
    assert isinstance(b.report, PoolTallies)
    shared = SharedRouter(b, b.report.target, [r.url for r in b.replicas], FailingRedis(exc))
    order, _ = await shared.order(completion(SYSTEM + "anyone?"), None, NOW)
    assert sorted(order) == [0, 1, 2]  # routed all the same, by the local order
    metrics.flush(routing.tallies)
    labels = {"target": b.report.target, "cause": cause}
    assert REGISTRY.get_sample_value("gateway_shared_prefix_fallbacks_total", labels) == 1
    assert decisions(routing, b) == {("local", "new"): 1}

"""The connection counts behind ``server.max_connections_per_client`` and ``server.max_connections``
(``gateway/web/listener.py``): a protocol that stands in for aiohttp's records what reaches it."""

from __future__ import annotations

import asyncio
import resource
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.web.listener import ClientConnections, Guarded, connections_for, guarded_factory, raise_descriptor_limit


class Transport(asyncio.Transport):
    def __init__(self, host: str) -> None:
        super().__init__()
        self.host, self.sent, self.closed = host, b"", False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.host, 4321) if name == "peername" else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent += bytes(data)

    def close(self) -> None:
        self.closed = True


class Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list[str] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.events.append("data")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")


def test_no_cap_adds_nothing_to_a_connection() -> None:
    factory = Inner
    assert guarded_factory(factory, ClientConnections(0)) is factory


def test_a_refused_connection_is_answered_closed_and_never_reaches_aiohttp() -> None:
    clients = ClientConnections(1)
    first, second = Inner(), Inner()
    kept, refused = Guarded(first, clients), Guarded(second, clients)
    kept.connection_made(Transport("10.0.0.1"))
    transport = Transport("10.0.0.1")
    refused.connection_made(transport)
    refused.data_received(b"GET / HTTP/1.1\r\n\r\n")
    refused.connection_lost(None)
    assert transport.closed and transport.sent.startswith(b"HTTP/1.1 429 ")
    assert second.events == [] and first.events == ["made"]
    assert clients.open == {"10.0.0.1": 1} and clients.refused == 1
    other = Transport("10.0.0.2")  # another address has its own count
    Guarded(Inner(), clients).connection_made(other)
    assert not other.closed
    kept.connection_lost(None)
    assert first.events == ["made", "lost"] and clients.open == {"10.0.0.2": 1}


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(0, 4),
    total=st.integers(0, 8),
    steps=st.lists(st.tuples(st.booleans(), st.sampled_from("abc")), max_size=60),
)
def test_counts_follow_opens_and_closes_and_never_pass_the_caps(
    limit: int, total: int, steps: list[tuple[bool, str]]
) -> None:
    clients = ClientConnections(limit, total)
    live: dict[str, list[Guarded]] = {h: [] for h in "abc"}
    for opening, host in steps:
        if opening:
            conn = Guarded(Inner(), clients)
            transport = Transport(host)
            conn.connection_made(transport)
            held = sum(map(len, live.values()))
            if transport.closed:  # refused by exactly one of the caps, and the answer says which
                full = total > 0 and held == total
                assert full or len(live[host]) == limit
                assert transport.sent.startswith(b"HTTP/1.1 503 " if full else b"HTTP/1.1 429 ")
            else:
                assert (not total or held < total) and (not limit or len(live[host]) < limit)
                live[host].append(conn)
        elif live[host]:
            live[host].pop().connection_lost(None)
        assert clients.count == sum(map(len, live.values()))
        if limit:
            assert clients.open == {h: len(c) for h, c in live.items() if c}


def test_the_descriptor_limit_is_raised_to_the_hard_one_and_sets_the_default_cap() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
        assert raise_descriptor_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if hard != resource.RLIM_INFINITY:
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert connections_for(20_000) == 9_936 and connections_for(100) == 1

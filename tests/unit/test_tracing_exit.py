"""A trace collector that accepts connections and never answers holds shutdown for at most
``tracing.CLOSE_SECONDS`` (documented in docs/operations.md), however long its export would wait."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

import pytest

from gateway.core.request import Operation
from gateway.obs import tracing
from gateway.runtime.config import TracingConfig


@pytest.fixture
async def silent_collector() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """Accepts, reads what it is sent, never answers until the test ends: (its URL, the spans
    arrived). Then it answers 200, and the test waits for the exporter's thread to end: cut off, the
    exporter would retry for a minute in the background, drawing its jitter from the global ``random``,
    which a Hypothesis test running then reports as its own flaw (a full unit run did, twice)."""
    arrived = asyncio.Event()
    release = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        arrived.set()
        length = next(
            int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length"
        )
        await reader.readexactly(length)
        await release.wait()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/traces", arrived
    finally:
        release.set()
        for thread in [t for t in threading.enumerate() if t.name == "tracing-shutdown"]:
            await asyncio.to_thread(thread.join)
        server.close()


async def test_a_collector_that_never_answers_holds_shutdown_no_longer_than_the_bound(
    silent_collector: tuple[str, asyncio.Event],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The exporter's own timeout is set to an hour by the environment: only the bound on ``close``
    can end it, so the test waits on ``close`` returning while the collector still holds the export."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "3600")
    monkeypatch.setattr(tracing, "EXPORT_SECONDS", 3600.0)
    monkeypatch.setattr(tracing, "CLOSE_SECONDS", 0.2)
    url, arrived = silent_collector
    tracer = tracing.build(TracingConfig(endpoint=url))
    assert tracer is not None
    tracer.begin({}, "POST", "/v1/completions", Operation.COMPLETION).server.end()
    closing = asyncio.create_task(tracer.close())
    await asyncio.wait_for(arrived.wait(), 60)  # the export is under way, and will never be answered
    await asyncio.wait_for(closing, 60)  # returns: the bound, not the collector, ended the wait
    assert any("took more than 0.2 s" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)

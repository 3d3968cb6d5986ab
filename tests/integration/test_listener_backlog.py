"""A burst of new connections while a served gateway's loop cannot accept (``gateway/web/listener.py``,
``BACKLOG``): the kernel's accept queue holds them all. Past the backlog the kernel drops SYNs and each
client waits out a 1 s retransmit; at aiohttp's default of 128 that stalled a third of 9,900 paced
streams opened at 990/s (``benchmarks/paced.py``)."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from gateway.web.listener import BACKLOG

BURST = 512  # four times aiohttp's default backlog, well under ours
BOUND = 30  # seconds: a failure guard, never reached when the gateway behaves
CONFIG = "auth: none\nmodels: [{name: m, targets: [{provider: mock}]}]\n"


def somaxconn() -> int:
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


@pytest.mark.skipif(
    not Path("/proc/sys/net/core/somaxconn").exists() or somaxconn() < BURST,
    reason="the kernel caps every backlog below the burst",
)
async def test_a_burst_waits_in_the_accept_queue_while_the_worker_is_stopped(serve: Any, tmp_path: Path) -> None:
    assert BACKLOG >= BURST
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(CONFIG)
    gw = await serve(["--config", str(cfg)], {})
    url, proc = gw.url, gw.proc
    host, port = url.removeprefix("http://").split(":")
    loop = asyncio.get_running_loop()
    socks = [socket.socket() for _ in range(BURST)]
    try:
        for s in socks:
            s.setblocking(False)
        proc.send_signal(signal.SIGSTOP)  # its loop accepts nothing: only the kernel's queue holds them
        try:
            # A dropped SYN would leave its connect pending past the guard: retransmits meet a queue
            # still full while the worker is stopped.
            connects = (loop.sock_connect(s, (host, int(port))) for s in socks)
            await asyncio.wait_for(asyncio.gather(*connects), BOUND)
        finally:
            proc.send_signal(signal.SIGCONT)
        last = socks[-1]
        await loop.sock_sendall(last, b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        assert (await asyncio.wait_for(loop.sock_recv(last, 4096), BOUND)).startswith(b"HTTP/1.1 200")
    finally:
        for s in socks:
            s.close()

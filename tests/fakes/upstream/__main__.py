"""``python -m tests.fakes.upstream``: serve one fake upstream until SIGINT or SIGTERM; prints
``READY <url>`` once listening.

    python -m tests.fakes.upstream --kind vllm --model tiny --port 0      # the aiohttp front end
    python -m tests.fakes.upstream --fast --port 9000 --chunks 64         # the benchmark's fast one
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Sequence
from typing import Any

from tests.fakes.upstream.fast import Settings, serve_fast
from tests.fakes.upstream.server import start
from tests.fakes.upstream.wire import WIRES


async def serve(args: argparse.Namespace) -> None:
    upstream = await start(args.kind, args.model, args.api_key, args.faults, args.host, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {upstream.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await upstream.close()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port; the READY line shows it")
    p.add_argument("--kind", default="vllm", choices=sorted(WIRES), help="the vendor wire format (default vllm)")
    p.add_argument("--model", action="append", help="served model name (repeatable)")
    p.add_argument("--api-key", default=None, help="require this key on API paths")
    p.add_argument("--faults", default="", help="fault markers applied to every request")
    fast = p.add_argument_group("fast front end (the overhead benchmark's: OpenAI's wire, cached answers)")
    fast.add_argument("--fast", action="store_true")
    fast.add_argument("--chunks", type=int, default=64, help="token chunks per stream (default 64)")
    fast.add_argument("--ttft-ms", type=float, default=0.0, help="delay before the first chunk")
    fast.add_argument("--gap-ms", type=float, default=0.0, help="delay between chunks")
    fast.add_argument("--vllm-chunks", action="store_true", help="streams in vLLM's chunks, not OpenAI's")
    fast.add_argument("--no-uvloop", action="store_true", help="asyncio's own loop even if uvloop is installed")
    a = p.parse_args(argv)
    if not a.fast:
        asyncio.run(serve(a))
        return
    if a.chunks < 1:
        p.error("--chunks must be at least 1")
    runner: Any = asyncio.run
    if not a.no_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            runner = uvloop.run
    ready = f"READY http://{a.host}:{a.port}/v1"
    runner(serve_fast(a.host, a.port, Settings(a.chunks, a.ttft_ms / 1000, a.gap_ms / 1000, a.vllm_chunks), ready))


main()

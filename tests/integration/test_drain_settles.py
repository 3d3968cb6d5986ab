"""A gateway told to stop (SIGTERM) settles its requests in flight before it exits, Redis up: a
stream that ends within the drain is charged its usage, one cut at the drain's end its bounds, and
the budget keeps no worst case reserved for either (served as a user runs it: ``llm-gateway serve``)."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.conftest import target
from tests.integration.dialect_clients import BEARER
from tests.integration.spend_rig import budget_spent, cost, settled, spend_config
from tests.support.redis_servers import RedisServer


async def test_requests_in_flight_at_sigterm_are_settled_before_the_gateway_exits(
    serve: Any, upstream: Any, redis_server: RedisServer, tmp_path: Path
) -> None:
    server = await upstream("vllm")
    team = f"t-{uuid.uuid4().hex[:8]}"
    data = spend_config(server, redis_server.url, team, budget={"amount": "1"})
    data["models"][0]["targets"] = [target(server, "vllm", name="up")]
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(json.dumps(data))
    gw = await serve(["--config", str(cfg), "--drain-seconds", "2"], {})
    async with aiohttp.ClientSession() as session:

        async def stream(fault: str, started: asyncio.Event) -> bytes:
            prompt = "drain " * 200 + f"[[fault:{fault}]]"
            body = {"model": "m", "prompt": prompt, "max_tokens": 200, "ignore_eos": True, "stream": True}
            async with session.post(gw.url + "/v1/completions", json=body, headers=BEARER) as resp:
                assert resp.status == 200
                first = await resp.content.readline()
                started.set()
                return first + await resp.content.read()

        began = [asyncio.Event(), asyncio.Event()]
        short = asyncio.create_task(stream("hold_after=1", began[0]))  # goes on when released: within the drain
        long = asyncio.create_task(stream("stall_after=1", began[1]))  # never ends: cut at the drain's end
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in began)), 30)
        gw.proc.send_signal(signal.SIGTERM)
        server.release()
        bodies = await asyncio.wait_for(asyncio.gather(short, long), 30)
    assert b"[DONE]" in bodies[0] and b"shutting down" in bodies[1]
    assert await asyncio.to_thread(gw.proc.wait, 30) == 0
    usage = await settled(redis_server.url, team, 2)  # both, before the process exited
    assert usage["requests"] == 2 and usage["completion_tokens"] >= 200
    assert usage["spend"] == cost(usage["prompt_tokens"], usage["completion_tokens"])
    assert await budget_spent(redis_server.url, team) == usage["spend"]  # no worst case left reserved

"""A gateway serving one model, ``tiny``, from one replica-pool target over real vLLM servers, on a
free port: what the pool tests share."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp.test_utils import TestServer

from backends.pool.replicas import ReplicaPool
from gateway.web.app import create_app
from gateway.web.state import GATEWAY
from tests.vllm.served import tier_config


@contextlib.asynccontextmanager
async def pool_gateway(target: dict[str, Any], key: str) -> AsyncIterator[tuple[str, ReplicaPool]]:
    """The gateway's URL and its pool, with ``key`` its one API key."""
    app = create_app(tier_config([{"name": "tiny", "targets": [target]}], key))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        pool = app[GATEWAY].models.resolve("tiny").route.upstreams[0]
        assert isinstance(pool, ReplicaPool)
        yield str(server.make_url("")), pool
    finally:
        await server.close()

"""A gateway in front of the tier's vLLM servers, in this process on a free port: the config each test
writes (its models, and one team ``t`` whose one key ``k`` is the test module's own), served for the
length of a ``with`` block. The replica-pool tests reach into the app as well (``pools.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp.test_utils import TestServer

from gateway.runtime.config import GatewayConfig, hash_key, parse_config
from gateway.web.app import create_app


def teams(key: str) -> list[dict[str, Any]]:
    """The config's one team, ``t``, whose one key ``k`` is ``key``."""
    return [{"id": "t", "keys": [{"id": "k", "sha256": hash_key(key)}]}]


def tier_config(models: list[dict[str, Any]], key: str, **extra: Any) -> GatewayConfig:
    """``models`` served to the one team holding ``key``; ``extra``: other sections (``tracing``)."""
    return parse_config({"models": models, "teams": teams(key), **extra})


@contextlib.asynccontextmanager
async def served(config: GatewayConfig) -> AsyncIterator[str]:
    """The gateway's base URL (no trailing slash) while the block runs; closed after it."""
    server = TestServer(create_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url(""))
    finally:
        await server.close()

"""The Redis client, built from the config's ``redis`` section: one client (a cluster client when
``redis.cluster``) with the configured timeouts, and its closing. Every user of shared state gets
this client from the composition root (``gateway.web.app``); none builds its own."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from gateway.runtime.config import RedisConfig


def redis_client(cfg: RedisConfig) -> Any:
    timeout = cfg.timeout_ms / 1000
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": 0,
    }
    if cfg.cluster:
        return RedisCluster.from_url(cfg.url, **options)
    return aioredis.Redis.from_url(cfg.url, retry_on_timeout=False, **options)


async def close_redis(client: Any) -> None:
    """Close what ``redis_client`` made."""
    await client.aclose()
    nodes = getattr(client, "nodes_manager", None)
    if nodes is not None:
        # A cluster client whose start-up failed (Redis down) counts as never initialized, and its
        # aclose() then closes nothing (redis-py 7.4): its nodes' connections are closed here either way.
        await nodes.aclose()
        await nodes.aclose("startup_nodes")
        # After a topology refresh (a timed-out node, MOVED) redis-py 7.4 routes keys through the new
        # node objects of its slot table while its node cache keeps the old ones of the same addresses,
        # and aclose() disconnects only the cache's (fixed upstream by redis/redis-py#4057): the slot
        # table's own are disconnected here, or their sockets stay open until the collector warns.
        routed = {id(node): node for owners in nodes.slots_cache.values() for node in owners}
        await asyncio.gather(*(node.disconnect() for node in routed.values()))

"""The Redis client, built from the config's ``redis`` section: one client (a cluster client when
``redis.cluster``) with the configured timeouts, and its closing. Every user of shared state gets
this client from the composition root (``gateway.web.app``); none builds its own."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from gateway.runtime.config import RedisConfig
from gateway.runtime.internals import close_cluster_nodes, share_cluster_nodes


def redis_client(cfg: RedisConfig) -> Any:
    timeout = cfg.timeout_ms / 1000
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": 0,
    }
    if cfg.cluster:
        client = RedisCluster.from_url(cfg.url, **options)
        share_cluster_nodes(client)  # one pool per node across topology refreshes (redis-py 7.4)
        return client
    return aioredis.Redis.from_url(cfg.url, retry_on_timeout=False, **options)


async def close_redis(client: Any) -> None:
    """Close what ``redis_client`` made."""
    await client.aclose()
    if isinstance(client, RedisCluster):  # what its aclose() leaves open (redis-py 7.4)
        await close_cluster_nodes(client)

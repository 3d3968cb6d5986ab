"""The one Redis client (``gateway.store.redis_client``) closes every connection it opened: a cluster
client's too after a topology refresh, when redis-py routes keys through node objects its node cache
does not hold. Counted by the Redis nodes themselves."""

from __future__ import annotations

import contextlib

import redis.asyncio as aioredis

from gateway.runtime.config import RedisConfig
from gateway.store.redis_client import close_redis, redis_client
from tests.support import eventually
from tests.support.redis_servers import RedisCluster

KEYS = [f"key-{i}" for i in range(12)]  # spread over the three nodes' slots
TIMEOUT_MS = 10_000  # none fires on a loaded machine: each refresh here is made on purpose


async def connections(cluster: RedisCluster) -> int:
    """Clients connected to the cluster's nodes, as the nodes list them (each count's own left out)."""
    total = 0
    for node in cluster.nodes:
        async with contextlib.aclosing(aioredis.Redis.from_url(node.url)) as peek:
            total += len(await peek.client_list()) - 1
    return total


async def test_a_cluster_client_closes_what_a_topology_refresh_opened(redis_cluster: RedisCluster) -> None:
    before = await connections(redis_cluster)
    client = redis_client(RedisConfig(url=redis_cluster.url, cluster=True, timeout_ms=TIMEOUT_MS))
    try:
        for key in KEYS:
            await client.set(key, 1)
        await client.nodes_manager.initialize()  # the refresh a timed-out node or a MOVED answer makes
        for key in KEYS:
            assert await client.get(key) == b"1"  # through the slot table's new node objects
        assert await connections(redis_cluster) > before
    finally:
        await close_redis(client)

    async def all_closed() -> bool:
        return await connections(redis_cluster) == before

    await eventually(all_closed, "every connection the client opened closed")


async def test_topology_refreshes_route_through_one_node_object_per_address(redis_cluster: RedisCluster) -> None:
    """redis-py 7.4 builds new node objects per refresh and drops the last ones with their sockets
    open (a generation per refresh); the gateway's client keeps routing through its node cache's."""
    client = redis_client(RedisConfig(url=redis_cluster.url, cluster=True, timeout_ms=TIMEOUT_MS))
    try:
        for key in KEYS:
            await client.set(key, 1)
        opened = await connections(redis_cluster)
        for _ in range(3):
            await client.nodes_manager.initialize()
            for key in KEYS:
                assert await client.get(key) == b"1"
        nodes = client.nodes_manager
        routed = {id(node) for owners in nodes.slots_cache.values() for node in owners}
        assert routed <= {id(node) for node in nodes.nodes_cache.values()}
        assert await connections(redis_cluster) == opened
    finally:
        await close_redis(client)

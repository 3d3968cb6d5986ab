"""Moved to ``tests.support.redis_servers``; this name stays while tests import it."""

from tests.support.redis_servers import REDIS_CLI, REDIS_SERVER, RedisCluster, RedisServer, free_port, wait_port

__all__ = ["REDIS_CLI", "REDIS_SERVER", "RedisCluster", "RedisServer", "free_port", "wait_port"]

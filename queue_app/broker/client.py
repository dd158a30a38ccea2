"""The Redis client of this process: a plain Redis, or a Redis Cluster.

A cluster is named by the URL form ``redis+cluster://[user:password@]host:port[,host:port...]``
(``rediss+cluster://`` for TLS): the listed nodes are where discovery starts, the client
finds the rest. Every key of a queue carries the queue's hash tag, so each script and
multi-key command touches one slot; commands across queues are made one per queue.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

from queue_app.conf import redis_url
from queue_app.redis_databases import cluster_nodes, is_cluster_url

# What a Redis call may raise when the store is unreachable or misbehaves. A cluster
# client that cannot reach any startup node raises RedisClusterException, which is not
# a RedisError.
REDIS_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException, OSError)

_client: redis.Redis | RedisCluster | None = None
_client_key: tuple[int, str] | None = None


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


def connect(url: str, **options: Any) -> redis.Redis | RedisCluster:
    """A new client for ``url``: a RedisCluster for the cluster URL form, else a Redis."""
    if not is_cluster_url(url):
        return redis.Redis.from_url(url, **options)
    parts = urlsplit(url)
    nodes = [ClusterNode(host, port) for host, port in cluster_nodes(url)]
    if parts.username:
        options.setdefault("username", unquote(parts.username))
    if parts.password:
        options.setdefault("password", unquote(parts.password))
    if parts.scheme == "rediss+cluster":
        options.setdefault("ssl", True)
    return RedisCluster(startup_nodes=nodes, **options)


def get_client() -> redis.Redis | RedisCluster:
    """A client per process (re-created after fork, or when REDIS_URL changes), from
    settings.REDIS_URL (see conf.redis_url)."""
    global _client, _client_key
    url = redis_url()
    key = (os.getpid(), url)
    if _client is None or _client_key != key:
        _client = connect(
            url,
            decode_responses=True,
            socket_connect_timeout=5,
            socket_timeout=30,
            health_check_interval=30,
        )
        _client_key = key
    return _client

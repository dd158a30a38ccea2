"""The Redis client of this process."""

from __future__ import annotations

import os

import redis

from queue_app.conf import redis_url

_client: redis.Redis | None = None
_client_pid: int | None = None


def get_client() -> redis.Redis:
    """A client per process (re-created after fork), from settings.REDIS_URL (see conf.redis_url)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = redis.Redis.from_url(
            redis_url(),
            decode_responses=True,
            socket_connect_timeout=5,
            socket_timeout=30,
            health_check_interval=30,
        )
        _client_pid = os.getpid()
    return _client

"""Liveness of the two stores, for /api/health/ and load balancers."""

from __future__ import annotations

import redis
from django.db import DatabaseError, connection

from queue_app.conf import redis_url

# A health probe must answer fast even when a store hangs.
REDIS_TIMEOUT_SECONDS = 2.0


def check_postgresql() -> str:
    """'ok', or the error that the query raised."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return "ok"


def check_redis() -> str:
    """'ok', or the error from a PING on a fresh connection (not the pooled client)."""
    client = redis.Redis.from_url(
        redis_url(),
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    finally:
        client.close()
    return "ok"


def check_all() -> dict[str, str]:
    return {"postgresql": check_postgresql(), "redis": check_redis()}

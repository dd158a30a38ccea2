"""Liveness of the two stores, for /api/health/ and load balancers.

Both checks run at once in threads and the answer waits at most
HEALTH_TIMEOUT_SECONDS: a store that has not answered by then counts as
down, so a hung PostgreSQL costs the probe a second, not the connection
pool's timeout.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor, wait

import psycopg
from django.db import connection
from psycopg_pool import PoolTimeout

from queue_app.broker.client import REDIS_ERRORS, connect
from queue_app.conf import redis_url
from queue_app.engine import sql

HEALTH_TIMEOUT_SECONDS = 1.0
# libpq counts a connect timeout in whole seconds, and no fewer than 2.
HEALTH_CONNECT_TIMEOUT_SECONDS = max(2, math.ceil(HEALTH_TIMEOUT_SECONDS))
TIMED_OUT = f"no answer within {HEALTH_TIMEOUT_SECONDS:g} s"

# A few threads shared by all requests; a check stuck past the deadline ends on its own.
_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="health")


def check_postgresql() -> str:
    """'ok', or the error that the query raised.

    Neither way waits on a down server for longer than a few seconds: a check
    thread still waiting would hold up its process's exit that long (Python
    joins these threads at exit). From the pool, a connection is waited for
    HEALTH_TIMEOUT_SECONDS, not the pool's own timeout; without one, the check
    connects itself with a connect timeout, which libpq otherwise lacks.
    """
    pool = connection.pool
    try:
        if pool is None:
            params = connection.get_connection_params()
            params["connect_timeout"] = HEALTH_CONNECT_TIMEOUT_SECONDS
            with psycopg.connect(**params) as direct:
                direct.execute(sql.query("ping")).fetchone()
        else:
            pool.open()  # as Django's first connection would
            with pool.connection(timeout=HEALTH_TIMEOUT_SECONDS) as pooled:
                pooled.execute(sql.query("ping")).fetchone()
    except (psycopg.Error, PoolTimeout) as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return "ok"


def check_redis() -> str:
    """'ok', or the error from a PING on a fresh connection (not the pooled client)."""
    client = None
    try:
        # A cluster client asks a node for the slot map here, so it can fail too.
        client = connect(
            redis_url(),
            socket_connect_timeout=HEALTH_TIMEOUT_SECONDS,
            socket_timeout=HEALTH_TIMEOUT_SECONDS,
        )
        client.ping()
    except REDIS_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    finally:
        if client is not None:
            client.close()
    return "ok"


def check_all() -> dict[str, str]:
    """Each store's 'ok' or error, within HEALTH_TIMEOUT_SECONDS."""
    futures = {
        "postgresql": _executor.submit(check_postgresql),
        "redis": _executor.submit(check_redis),
    }
    wait(futures.values(), timeout=HEALTH_TIMEOUT_SECONDS)
    return {store: future.result() if future.done() else TIMED_OUT for store, future in futures.items()}

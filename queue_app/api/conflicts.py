"""Serialization failures and deadlocks: two requests' transactions collided; neither store is down.

PostgreSQL aborts one of two transactions that wait on each other (SQLSTATE
40P01) or that cannot be serialised (40001); the other goes on. Running the
loser again usually succeeds, so the API runs a transaction it owns again, a
bounded number of times (``API_TRANSACTION_RETRIES``), before answering 409
``transaction_conflict``, which a client may retry. It is never a 503.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from django.db import OperationalError, connection

from queue_app import conf
from queue_app.observability.logs import get_logger

log = get_logger(__name__)

TRANSACTION_CONFLICT_STATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected


def is_transaction_conflict(exc: BaseException) -> bool:
    cause = exc.__cause__ if isinstance(exc, OperationalError) else exc
    return getattr(cause, "sqlstate", None) in TRANSACTION_CONFLICT_STATES


def retry_transaction_conflicts[T](run: Callable[[], T]) -> T:
    """``run()``, again after a transaction conflict, at most API_TRANSACTION_RETRIES more times.

    Only when ``run`` owns its transaction: inside a caller's atomic block the
    caller's earlier work was lost with it, so the conflict is raised.
    """
    retries = conf.project_setting("API_TRANSACTION_RETRIES")
    for attempt in range(retries + 1):
        try:
            return run()
        except OperationalError as exc:
            if not is_transaction_conflict(exc) or connection.in_atomic_block or attempt == retries:
                raise
            log.info("api_transaction_retried", attempt=attempt + 1, sqlstate=exc.__cause__.sqlstate)
            # Jitter: two requests that collided should not collide again in step.
            time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
    raise AssertionError("unreachable")

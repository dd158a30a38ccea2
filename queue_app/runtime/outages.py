"""Keeping a process alive while PostgreSQL or Redis is unreachable.

Processes catch store errors, back off (capped), log the failure once per
interval instead of once per try, and log when the store answers again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from django.db import DatabaseError, InterfaceError, connection

from queue_app import broker
from queue_app.observability.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")

STORE_ERRORS = (DatabaseError, InterfaceError, psycopg.Error, *broker.REDIS_ERRORS)


class OutageGuard:
    errors = STORE_ERRORS

    def __init__(self, process: str, *, max_backoff: float = 10.0, log_every: float = 30.0) -> None:
        self.process = process
        self.max_backoff = max_backoff
        self.log_every = log_every
        self.failures = 0
        self._last_logged = 0.0

    def failed(self, exc: BaseException, *, sleep=time.sleep) -> None:
        """Record a failure, log it at most once per interval, and back off."""
        self.failures += 1
        now = time.monotonic()
        if self.failures == 1 or now - self._last_logged >= self.log_every:
            log.error(
                "store_unavailable",
                process=self.process,
                error=f"{type(exc).__name__}: {exc}".strip()[:500],
                consecutive_failures=self.failures,
            )
            self._last_logged = now
        else:
            # Each try at debug level: what a test (or an operator) can count.
            log.debug("store_still_unavailable", process=self.process, consecutive_failures=self.failures)
        sleep(min(self.max_backoff, 0.2 * 2 ** min(self.failures, 10)))

    def recovered(self) -> None:
        if self.failures:
            log.info("store_available_again", process=self.process, after_failures=self.failures)
            self.failures = 0

    def attempt(self, step: Callable[[], T], *, sleep=time.sleep) -> tuple[bool, T | None]:
        """Run one ``step`` of a process's loop: (True, its value), or (False, None) after a
        store error, the broken database connection closed (the pool discards it) and the
        backoff slept with ``sleep``."""
        try:
            value = step()
        except self.errors as exc:
            if isinstance(exc, DatabaseError):
                connection.close()
            self.failed(exc, sleep=sleep)
            return False, None
        self.recovered()
        return True, value

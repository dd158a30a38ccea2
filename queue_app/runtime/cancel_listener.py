"""Hears at once that a running job was asked to cancel, and stops its attempt.

``request_cancel`` NOTIFYs "<job id> <fence>" in the cancel's own transaction,
so the worker holding that attempt learns of it at the commit, not at its next
heartbeat. The heartbeat still reads each held job's status: a notification
missed while this connection was down costs at most one heartbeat.

Behind PgBouncer in transaction mode (``DATABASE_PGBOUNCER``) a LISTEN hears nothing, and
would stay on a pooled server connection, each NOTIFY to it dropped by PgBouncer with a
warning: there the listener does not listen, and the heartbeat carries every cancel.
"""

from __future__ import annotations

import select
import threading

import psycopg

from queue_app.conf import project_setting
from queue_app.engine import sql
from queue_app.exceptions import CancelRequested
from queue_app.observability.logs import get_logger
from queue_app.runtime.holdings import Holdings

log = get_logger(__name__)

# How long a wait for a notification lasts before the thread looks whether it must stop.
WAIT_SECONDS = 1.0


class CancelListener(threading.Thread):
    def __init__(self, holdings: Holdings, worker_id: str) -> None:
        super().__init__(name=f"cancel listener {worker_id}", daemon=True)
        self.holdings = holdings
        self.worker_id = worker_id
        self._stopped = threading.Event()
        self._connection: psycopg.Connection | None = None

    def run(self) -> None:
        if project_setting("DATABASE_PGBOUNCER"):
            return
        while not self._stopped.is_set():
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = sql.dedicated_connection()
                    self._connection.execute(sql.query("listen_cancel"))
                ready, _, _ = select.select([self._connection.fileno()], [], [], WAIT_SECONDS)
                if ready:
                    for notification in self._connection.notifies(timeout=0):
                        self.heard(notification.payload)
            except (psycopg.Error, OSError, ValueError) as exc:
                self._close()
                log.debug("cancel_listen_failed", worker=self.worker_id, error=str(exc)[:300])
                self._stopped.wait(WAIT_SECONDS)
        self._close()

    def heard(self, payload: str) -> None:
        job_id, _, fence = payload.partition(" ")
        attempt = self.holdings.find(job_id, int(fence)) if fence.isdigit() else None
        if attempt is not None:
            log.info("job_cancel_requested", job_id=job_id, fence=int(fence), worker=self.worker_id)
            attempt.request_stop(CancelRequested)

    def _close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except (psycopg.Error, OSError):
                pass
        self._connection = None

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=WAIT_SECONDS + 2)

"""The relay: copies outbox rows to Redis, at least once.

A batch of undispatched rows is locked with ``FOR UPDATE SKIP LOCKED``,
applied to Redis in one pipeline, then marked dispatched in the same
transaction. Several relays can run (one takes over when another dies), but
they take turns, one batch at a time under a transaction-level advisory lock:
batches applied at once could reach Redis out of outbox order, which puts a
strict-FIFO queue out of order and can apply a job's removal after the enqueue
that followed it (a cancel, then a retry), leaving the job in no structure. A
crash after the Redis push and before the commit leaves the rows undispatched:
the next relay re-sends them, and the worker's compare-and-set claim absorbs
the duplicates.

Ready jobs on priority queues skip the relay on the common path: the
process that enqueued them pushes them right after its commit
(DISPATCH_ON_COMMIT). Their rows wait RELAY_GRACE_SECONDS; the relay then
sends those whose job is still queued (the push was lost to a crash or an
outage; a repeated push of the same member changes nothing).
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable

import psycopg
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.module_loading import import_string

from queue_app import broker, conf
from queue_app.conf import queue_settings
from queue_app.engine import selectors, sql
from queue_app.models import OutboxMessage
from queue_app.observability import tracing
from queue_app.observability.logs import get_logger
from queue_app.runtime.outages import OutageGuard
from queue_app.states import Status

log = get_logger("queue_app.relay")

PRUNE_EVERY_SECONDS = 60.0
# The first key of the relays' turn-taking lock ("outbox").
DISPATCH_LOCK_CLASS = 0x6F757462
PRUNE_CHUNK = 5000


def fault_point_handler() -> Callable[[str], None] | None:
    """The handler test or chaos settings install for named fault points; None in production."""
    path = conf.project_setting("FAULT_POINT_HANDLER")
    return import_string(path) if path else None


class Relay:
    def __init__(self, *, batch_size: int | None = None, poll_seconds: float | None = None) -> None:
        settings = queue_settings()
        self.batch_size = batch_size or settings.RELAY_BATCH_SIZE
        self.poll_seconds = poll_seconds or settings.RELAY_POLL_SECONDS
        self.stopping = False
        self.dispatched_total = 0
        self._listener: psycopg.Connection | None = None
        self._last_prune = 0.0
        self._fault = fault_point_handler()

    @tracing.traced("jobqueue.relay")
    def relay_batch(self) -> int:
        """Dispatch one batch; returns how many rows it sent."""
        fifo_queues = queue_settings().QUEUES
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(sql.query("lock_dispatch"), {"lock_class": DISPATCH_LOCK_CLASS})
            rows = list(
                OutboxMessage.objects.select_for_update(skip_locked=True)
                .filter(dispatched_at__isnull=True)
                .filter(Q(dispatch_after__isnull=True) | Q(dispatch_after__lte=Now()))
                .order_by("id")
                .values_list(
                    "id", "action", "job_id", "queue", "score", "member", "dispatch_after", "to_head"
                )[: self.batch_size]
            )
            if not rows:
                return 0
            # A row its enqueuer pushed itself is only a safety net: sent again only while
            # its job waits (a claimed job would be popped again for nothing).
            pushed = [row[2] for row in rows if row[6] is not None]
            waiting = set(selectors.statuses(map(str, pushed)).items()) if pushed else set()
            broker.apply(
                broker.get_client(),
                (
                    broker.Intent(
                        action, str(job_id), queue, fifo_queues.get(queue, False), score, member, to_head
                    )
                    for _, action, job_id, queue, score, member, dispatch_after, to_head in rows
                    if dispatch_after is None or (str(job_id), Status.QUEUED) in waiting
                ),
            )
            if self._fault is not None:
                # The crash window the outbox exists for: pushed, not yet marked.
                self._fault("relay.after_push")
            OutboxMessage.objects.filter(id__in=[row[0] for row in rows]).update(dispatched_at=Now())
        log.debug("outbox_dispatched", count=len(rows))
        return len(rows)

    def drain(self) -> int:
        """Dispatch until the outbox is empty (or only other relays' locked rows remain)."""
        total = 0
        while not self.stopping:
            sent = self.relay_batch()
            total += sent
            if sent < self.batch_size:
                break
        self.dispatched_total += total
        return total

    def prune(self) -> int:
        """Delete dispatched rows older than the retention, in chunks."""
        retention = queue_settings().OUTBOX_RETENTION_SECONDS
        deleted = 0
        while not self.stopping:
            with connection.cursor() as cursor:
                cursor.execute(sql.query("prune_outbox"), {"retention": retention, "limit": PRUNE_CHUNK})
                deleted += cursor.rowcount
                if cursor.rowcount < PRUNE_CHUNK:
                    break
        if deleted:
            log.info("outbox_pruned", count=deleted)
        return deleted

    def _listen(self) -> None:
        """LISTEN on a dedicated autocommit connection outside Django's pool, for NOTIFY."""
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.pop("server_side_binding", None)
        self._listener = psycopg.connect(**params, autocommit=True)
        self._listener.execute(sql.query("listen_outbox"))

    def wait_for_notification(self) -> None:
        """Sleep until a NOTIFY arrives or the poll interval passes (the fallback).

        Without a listener yet (the first wait, or after its connection failed) it
        LISTENs and returns at once: a NOTIFY reaches only sessions already listening,
        so rows committed since the last drain read the outbox need one more drain.
        """
        try:
            if self._listener is None or self._listener.closed:
                self._listen()
                return
            ready, _, _ = select.select([self._listener.fileno()], [], [], self.poll_seconds)
            if ready:
                for _ in self._listener.notifies(timeout=0):
                    pass
        except (psycopg.Error, OSError) as exc:
            if self._listener is not None:
                self._listener.close()
            self._listener = None
            log.warning("relay_listen_failed", error=str(exc))
            time.sleep(min(self.poll_seconds, 1.0))

    def run(self, *, once: bool = False) -> None:
        """Relay until stopped, riding out store outages; ``once`` drains the outbox one time
        and returns, or raises the store error that stopped it."""
        guard = OutageGuard("relay")
        log.info("relay_started", batch_size=self.batch_size, poll_seconds=self.poll_seconds)
        while not self.stopping:
            try:
                self.drain()
                if time.monotonic() - self._last_prune > PRUNE_EVERY_SECONDS:
                    self.prune()
                    self._last_prune = time.monotonic()
                guard.recovered()
            except guard.errors as exc:
                if isinstance(exc, DatabaseError):
                    connection.close()
                if once:
                    raise  # a single drain was asked for: its caller reports the failure
                guard.failed(exc)
                continue
            if once:
                break
            self.wait_for_notification()
        if self._listener is not None:
            self._listener.close()
        log.info("relay_stopped", dispatched=self.dispatched_total)

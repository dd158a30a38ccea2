"""The relay: copies outbox rows to Redis, at least once.

A batch of due undispatched rows is claimed in one short statement of its own
(``FOR UPDATE SKIP LOCKED``, then their ``dispatch_after`` moved to the claim's
end), pushed to Redis in one pipeline with no database lock held, then marked
dispatched. Several relays work at once without waiting on each other: each
passes over the rows another has claimed, and a relay stuck on a slow or
unreachable Redis holds up only its own batch. A relay that dies between its
push and the mark leaves its rows claimed until RELAY_CLAIM_SECONDS pass; then
another relay sends them again, and the worker's compare-and-set claim absorbs
the duplicates.

Concurrent batches may reach Redis in any order, so a row is not applied as
written: the claim reads each row's job as it is now, and the row places the
job where its current state says (see ``row_intent``). A row written for an
earlier place of its job (before a cancel and a retry, say) takes that stale
place out instead of putting the job back in line ahead of its turn. Two things
keep the order that the current state cannot:

- a strict-FIFO list's order is the outbox's: a queue's rows are claimed only
  up to its first row another relay holds, so no row reaches the list before
  an earlier one;
- a push that read the job before a change may land after the push made for
  that change: the mark compares the job row's version with the one the claim
  read, and a row whose job changed meanwhile is sent again, with the job as
  it is then.

Ready jobs on priority queues skip the relay on the common path: the
process that enqueued them pushes them right after its commit
(DISPATCH_ON_COMMIT). Their rows wait RELAY_GRACE_SECONDS; the relay then
sends those whose job is still queued at that place (the push was lost to a
crash or an outage; a repeated push of the same member changes nothing), and
takes out the push of a job cancelled or retried since (it may have landed
after the cancel's removal).
"""

from __future__ import annotations

import select
import time
from collections.abc import Mapping

import psycopg
from django.db import DatabaseError, connection

from queue_app import broker, conf
from queue_app.conf import queue_settings
from queue_app.engine import outbox, sql
from queue_app.engine.outbox import ClaimedRow
from queue_app.models import OutboxMessage
from queue_app.observability import tracing
from queue_app.observability.logs import get_logger
from queue_app.runtime.outages import OutageGuard
from queue_app.states import Status

log = get_logger(__name__)

PRUNE_EVERY_SECONDS = 60.0
PRUNE_CHUNK = 5000
# Statuses a job reaches only through a worker's claim, which popped its ready member.
TAKEN_BY_A_WORKER = frozenset({Status.PROCESSING, Status.COMPLETED, Status.FAILED})


def row_intent(row: ClaimedRow, fifo_queues: Mapping[str, bool]) -> broker.Intent | None:
    """What one claimed row changes in Redis, decided by its job's current state.

    Only a row written for the job's current place puts it in line (an enqueue
    row whose member is the job's member now): at its current priority, or on
    its FIFO list. A row for an earlier place (the job was cancelled, retried
    or scheduled since) takes that place out; a later row of the job places it.
    A job waiting for a time is kept in the retry set at its current due time.
    None: nothing to change.
    """
    job = row.job
    fifo = fifo_queues.get(job.queue, False)
    current = broker.ready_member(row.job_id, job.enqueued_at)
    # A schedule row's place is the retry set (the bare id); a row from before members
    # counts as written for the job's current place.
    own = row.member if row.action != OutboxMessage.Action.SCHEDULE else ""
    queued = job.status == Status.QUEUED
    if queued and job.next_retry_at is None:
        # A schedule row whose time has come by the claim places the job as well: that
        # row is the only one its retry wrote, so nothing else would put it in line.
        if row.action == OutboxMessage.Action.SCHEDULE or (
            row.action == OutboxMessage.Action.ENQUEUE and own in ("", current)
        ):
            score = broker.ready_score(job.priority_value)
            return broker.Intent("enqueue", row.job_id, job.queue, fifo, score, current, row.to_head)
        if own == current:
            return None  # the job's place now: left alone
        # A row of an earlier place: that member comes out of the ready set, and only it. The
        # job's current place, written by a later row, may be the retry set still (due, not
        # yet promoted): taking the id out of it would leave the job in no structure at all.
        return broker.Intent("unready", row.job_id, row.queue, fifo, member=own)
    elif queued:
        # Out of the ready set (under the member this row knew), into the retry set.
        due = broker.due_score(job.next_retry_at)
        return broker.Intent("schedule", row.job_id, job.queue, fifo, due, own)
    elif row.pushed and own == current and job.status in TAKEN_BY_A_WORKER:
        # Pushed by its enqueuer, then popped by the worker that took it: nothing left
        # of it to take out (the common case, sent nothing, as before).
        return None
    return broker.Intent("remove", row.job_id, row.queue, fifo, member=own)


class Relay:
    def __init__(self, *, batch_size: int | None = None, poll_seconds: float | None = None) -> None:
        settings = queue_settings()
        self.batch_size = batch_size or settings.RELAY_BATCH_SIZE
        self.poll_seconds = poll_seconds or settings.RELAY_POLL_SECONDS
        self.claim_seconds = settings.RELAY_CLAIM_SECONDS
        self.stopping = False
        self.dispatched_total = 0
        self._listener: psycopg.Connection | None = None
        self._last_prune = 0.0
        self._fault = conf.fault_point_handler()
        # After relay_batch: whether the outbox may hold more due rows for this relay.
        self._more = False

    @tracing.traced("jobqueue.relay")
    def relay_batch(self) -> int:
        """Claim one batch, push it, mark it; returns how many rows it marked dispatched."""
        queues = queue_settings().QUEUES
        claim = outbox.claim_outbox(
            limit=self.batch_size,
            claim_seconds=self.claim_seconds,
            fifo_queues=[queue for queue, fifo in queues.items() if fifo],
        )
        if not claim.rows:
            self._more = False
            return 0
        intents = [intent for row in claim.rows if (intent := row_intent(row, queues)) is not None]
        try:
            broker.apply(broker.get_client(), intents)
        except broker.REDIS_ERRORS:
            # Nothing to wait out: the rows are due again for the first relay Redis answers.
            outbox.release_outbox_claim(claim)
            raise
        if self._fault is not None:
            # The crash window the outbox exists for: pushed, not yet marked.
            self._fault("relay.after_push")
        dispatched, changed = outbox.finish_outbox_claim(claim)
        # A full batch, or rows whose job changed under the push (due again at once).
        self._more = len(claim.rows) == self.batch_size or changed > 0
        if changed:
            log.debug("outbox_job_changed_during_push", count=changed)
        log.debug("outbox_dispatched", count=dispatched)
        return dispatched

    def drain(self) -> int:
        """Dispatch until no due row is left for this relay (the rest are other relays' claims)."""
        total = 0
        while not self.stopping:
            total += self.relay_batch()
            if not self._more:
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
        Behind PgBouncer in transaction mode (``DATABASE_PGBOUNCER``) a LISTEN hears
        nothing, and would stay on a pooled server connection: there it only polls.
        """
        if conf.project_setting("DATABASE_PGBOUNCER"):
            time.sleep(self.poll_seconds)
            return
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

"""The reconciler: make Redis agree with PostgreSQL.

PostgreSQL is the record and Redis only says what should happen next, so
Redis can always be rebuilt from PostgreSQL. One run, in this order:

1. rescue: ``processing`` jobs whose lease expired (their worker died) go back
   to ``queued`` with a backoff, or to ``failed`` when no attempt is left
   (``execution.rescue_expired_leases``; their outbox rows reach Redis through
   the relay). Each queue's maintenance leader does this every
   LEASE_RESCUE_SECONDS (runtime/maintenance.py); the pass does it again, for
   every queue, for the queues no running worker serves. Queued jobs past
   their ``expires_at`` are settled as expired the same way
   (``execution.expire_queued_jobs``);
2. prune: ids in any structure of a configured queue whose job is missing, no
   longer queued, or belongs elsewhere are removed (before restoring, so the
   scan does not walk the ids this run is about to add);
3. restore: queued jobs in no Redis structure are re-added: due ones to the
   ready structure (priority score, or the head of the FIFO list in enqueue
   order, ahead of the jobs pushed since they went missing), waiting ones to
   the retry set.

It writes Redis directly through ``broker`` (a repair, not an intent, so
no outbox row) and works in batches: keyset pages of queued jobs, pipelined
membership look-ups, chunked scans. Memory stays flat however many jobs
there are.

Never racing the relay: a job with an undispatched outbox row belongs to the
relay, which will put it right; the reconciler skips it in both directions.
A job's status and its outbox rows are read in one statement, and the relay
writes Redis before it marks a row dispatched, so "dispatched" in our
snapshot means Redis already had it. Duplicates the remaining races produce
are harmless: a worker claims by compare-and-set and drops the rest.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import redis
from django.db import connection, reset_queries

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import execution, sql
from queue_app.ids import canonical_job_id
from queue_app.observability import metrics
from queue_app.observability.logs import get_logger
from queue_app.runtime.outages import OutageGuard
from queue_app.runtime.stop_signal import StopSignal
from queue_app.states import Status

log = get_logger(__name__)

# Counted actions, in summary order.
RESTORED_READY = "restored_ready"
RESTORED_RETRY = "restored_retry"
REMOVED_STALE = "removed_stale"
REQUEUED_EXPIRED = "requeued_expired"
FAILED_EXPIRED = "failed_expired"
SETTLED_EXPIRED = "expired"
SKIPPED_RELAY = "skipped_relay_pending"
SKIPPED_GRACE = "skipped_grace"
SKIPPED_UNKNOWN_QUEUE = "skipped_unknown_queue"
ACTIONS = (
    RESTORED_READY,
    RESTORED_RETRY,
    REMOVED_STALE,
    REQUEUED_EXPIRED,
    FAILED_EXPIRED,
    SETTLED_EXPIRED,
    SKIPPED_RELAY,
    SKIPPED_GRACE,
    SKIPPED_UNKNOWN_QUEUE,
)

# A run logs its first changes of each kind one by one at info, the rest at debug:
# a small repair keeps its full detail, and restoring a million jobs after a Redis
# loss does not write a million lines (the summary and metrics count every change).
CHANGES_LOGGED_PER_ACTION = 100
# A long run logs (and reports) what it has done so far this often.
PROGRESS_EVERY_SECONDS = 5.0

# How a dry run describes each change it would make.
_WOULD = {
    RESTORED_READY: "restore to the ready structure",
    RESTORED_RETRY: "restore to the retry set",
    REMOVED_STALE: "remove a stale id",
    REQUEUED_EXPIRED: "requeue (lease expired)",
    FAILED_EXPIRED: "fail (lease expired, no attempt left)",
    SETTLED_EXPIRED: "settle as expired (not started by its expiry)",
}


def _fetch(statement: str, params) -> list[tuple]:
    # Under DEBUG, Django keeps every statement (here with arrays of thousands of
    # ids) in connection.queries until a request ends, which never happens in a
    # long-running command: clear it, or memory grows with every page.
    reset_queries()
    with connection.cursor() as cursor:
        cursor.execute(sql.query(statement), params)
        return cursor.fetchall()


@dataclass(frozen=True)
class QueuedJob:
    id: str
    queue: str
    priority_value: int
    enqueued_at: datetime
    next_retry_at: datetime | None
    due: bool
    relay_pending: bool
    recent: bool
    # Waits out of Redis behind its concurrency key's job in line: nothing to restore.
    parked: bool = False


@dataclass(frozen=True)
class RunReport:
    counts: Counter
    dry_run: bool
    seconds: float

    def summary(self) -> str:
        """One line, stable keys: what one run did (or, in a dry run, would do)."""
        counts = " ".join(f"{action}={self.counts[action]}" for action in ACTIONS)
        prefix = "reconcile dry run (nothing changed):" if self.dry_run else "reconcile:"
        return f"{prefix} {counts} seconds={self.seconds:.2f}"


class Reconciler:
    """Makes Redis agree with PostgreSQL; ``run_once`` for one pass, ``run_forever`` to keep at it."""

    def __init__(
        self,
        *,
        dry_run: bool = False,
        batch_size: int | None = None,
        grace_seconds: float | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        settings = queue_settings()
        self.dry_run = dry_run
        self.batch_size = batch_size or settings.RECONCILE_BATCH_SIZE
        self.grace_seconds = settings.RECONCILE_GRACE_SECONDS if grace_seconds is None else grace_seconds
        self.queues = dict(settings.QUEUES)
        # Where the run summary (and, in a dry run, each would-be change) is written.
        self.report = report or (lambda line: None)
        self._looping = False
        # Ids per Lua call stay well below Lua's unpack() limit (about 8000).
        self._script_chunk = min(self.batch_size, 1000)
        self._stop = StopSignal()
        self._counts: Counter = Counter()
        # Queued jobs per queue missing from QUEUES, this pass: one warning each at its end.
        self._unknown_queues: Counter = Counter()
        self._started = self._last_progress = time.monotonic()

    def stop(self) -> None:
        """Finish the current batch, then return (safe from a signal handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- running -------------------------------------------------------------

    def run_once(self) -> RunReport:
        """One full pass; raises the store's error if PostgreSQL or Redis fails mid-way."""
        self._counts = Counter()
        self._unknown_queues = Counter()
        self._started = self._last_progress = time.monotonic()
        client = broker.get_client()
        self._rescue_expired_leases()
        self._expire_queued_jobs()
        self._prune_stale_ids(client)
        self._restore_missing(client)
        for queue, count in sorted(self._unknown_queues.items()):
            log.warning(
                "reconcile_unknown_queue",
                queue=queue,
                queued_jobs=count,
                dry_run=self.dry_run,
                detail="its queued jobs are left alone: configure the queue again, or cancel them",
            )
        seconds = time.monotonic() - self._started
        result = RunReport(counts=self._counts, dry_run=self.dry_run, seconds=seconds)
        log.info(
            "reconcile_finished",
            dry_run=self.dry_run,
            seconds=round(result.seconds, 3),
            **{action: self._counts[action] for action in ACTIONS},
        )
        # A loop reports a pass that did something; its idle passes are in the log alone.
        acted = any(count for action, count in self._counts.items() if not action.startswith("skipped"))
        if acted or not self._looping:
            self.report(result.summary())
        if not self.dry_run:
            metrics.reconciler_acted(self._counts)
        return result

    def run_forever(self, interval: float) -> None:
        """Run every ``interval`` seconds until stopped, riding out store outages.

        A failed run is retried with a backoff capped at the interval, logged at
        most once per interval while the outage lasts, and the loop resumes by
        itself when the store answers again.
        """
        self._looping = True
        guard = OutageGuard("reconciler", max_backoff=interval, log_every=interval)
        log.info("reconciler_started", interval=interval, dry_run=self.dry_run, batch_size=self.batch_size)
        while not self.stopping:
            done, _ = guard.attempt(self.run_once, sleep=self._stop.wait)
            if done:
                self._stop.wait(interval)
        log.info("reconciler_stopped")

    # --- 1. expired leases -----------------------------------------------------

    def _rescue_expired_leases(self) -> None:
        if self.dry_run:
            for page in self._pages("expired_leases_page", {}):
                for job_id, attempts, max_attempts in page:
                    action = REQUEUED_EXPIRED if attempts < max_attempts else FAILED_EXPIRED
                    self._record(action, job_id=job_id, attempt=attempts)
            return
        while not self.stopping:
            # Each batch is one transaction (SKIP LOCKED, so two reconcilers share the work).
            rescued = execution.rescue_expired_leases(limit=self.batch_size)
            for job in rescued:
                action = REQUEUED_EXPIRED if job.status == Status.QUEUED else FAILED_EXPIRED
                self._record(action, job_id=job.id, attempt=job.attempts)
            if len(rescued) < self.batch_size:
                return

    def _expire_queued_jobs(self) -> None:
        if self.dry_run:
            for page in self._pages("expired_jobs_page", {}):
                for (job_id,) in page:
                    self._record(SETTLED_EXPIRED, job_id=job_id)
            return
        while not self.stopping:
            expired = execution.expire_queued_jobs(limit=self.batch_size)
            for job in expired:
                self._record(SETTLED_EXPIRED, job_id=job.id)
            if len(expired) < self.batch_size:
                return

    # --- 2. stale ids ------------------------------------------------------------

    def _prune_stale_ids(self, client: redis.Redis) -> None:
        # A race, not a loss: a job read here as not queued may be queued again and
        # re-pushed by the relay before the removal lands. That leaves a queued job
        # missing from Redis; the next run's restore re-adds it (after the grace).
        for queue, fifo in self.queues.items():
            structures = (
                ("priority", broker.priority_key(queue), not fifo),
                ("fifo", broker.fifo_key(queue), fifo),
                ("retry", broker.retry_key(queue), True),
            )
            for structure, key, expected in structures:
                if self.stopping:
                    return

                def pick(ids, queue=queue, structure=structure, expected=expected):
                    return self._stale(ids, queue=queue, structure=structure, expected=expected)

                if structure == "fifo":
                    # Rebuilt without its stale ids, in chunks: one LREM per id would walk the
                    # whole list each time (broker/fifo_prune.py).
                    broker.prune_list(client, queue, pick, chunk=self.batch_size, remove=not self.dry_run)
                else:
                    broker.prune_sorted_set(client, key, pick, chunk=self.batch_size, remove=not self.dry_run)

    def _stale(self, ids: list[str], *, queue: str, structure: str, expected: bool) -> list[str]:
        """The ids among ``ids`` (found in ``structure`` of ``queue``) that must go."""
        # Priority-set members carry their enqueue time before the id.
        valid = {value: canonical_job_id(broker.member_job_id(value)) for value in ids}
        rows = _fetch("known_ids", {"ids": list({job_id for job_id in valid.values() if job_id})})
        known = {row[0]: row[1:] for row in rows}
        doomed = []
        for value in dict.fromkeys(ids):
            row = known.get(valid[value]) if valid[value] else None
            if row is None:
                reason, status = "missing", None
            else:
                status, job_queue, relay_pending = row
                if relay_pending:
                    # The relay's pending row (a cancel's remove, a retry's schedule)
                    # will set this id right; removing it now could undo the relay.
                    self._skip(SKIPPED_RELAY, job_id=value, queue=queue, structure=structure)
                    continue
                if status != Status.QUEUED:
                    reason = "not_queued"
                elif job_queue != queue:
                    reason = "wrong_queue"
                elif not expected:
                    reason = "wrong_structure"
                else:
                    continue
            doomed.append(value)
            self._record(
                REMOVED_STALE, job_id=value, queue=queue, structure=structure, reason=reason, status=status
            )
        self._progress()
        return doomed

    # --- 3. missing ids ------------------------------------------------------------

    def _restore_missing(self, client: redis.Redis) -> None:
        token = uuid.uuid4().hex
        fifo_queues = [queue for queue, fifo in self.queues.items() if fifo]
        try:
            # A set copy of each FIFO list makes membership O(1) per id (LPOS is O(N)).
            # A dry run creates it too, and deletes it below: no net change.
            for queue in fifo_queues:
                broker.snapshot_list(
                    client,
                    broker.fifo_key(queue),
                    broker.reconcile_members_key(queue, token),
                    chunk=self._script_chunk,
                )
            for page in self._pages("queued_jobs_page", {"grace": self.grace_seconds}):
                jobs = [QueuedJob(*row) for row in page]
                self._restore_page(client, [job for job in jobs if not job.parked], token)
            if not self.dry_run:
                # A crash before or during this leaves the rest of the staged ids only
                # in the staging key, which expires; the next run finds those jobs
                # missing and stages them again.
                for queue in fifo_queues:
                    broker.release_staged(client, queue, token, chunk=self._script_chunk)
        finally:
            with contextlib.suppress(redis.RedisError):
                for queue in fifo_queues:
                    broker.discard_reconcile_keys(client, queue, token)

    def _restore_page(self, client: redis.Redis, jobs: list[QueuedJob], token: str) -> None:
        known = [job for job in jobs if job.queue in self.queues]
        for job in jobs:
            if job.queue not in self.queues:
                self._unknown_queues[job.queue] += 1
                self._skip(SKIPPED_UNKNOWN_QUEUE, job_id=job.id, queue=job.queue, level="info")
        due = [job for job in known if job.due]
        # Popped but not yet claimed counts as present: the in-flight set gives the id
        # back to its ready structure when its deadline passes.
        lookups = [
            broker.Lookup(key(queue), [j.id for j in known if j.queue == queue])
            for queue in self.queues
            for key in (broker.retry_key, broker.inflight_key)
        ]
        for queue, fifo in self.queues.items():
            queue_due = [j for j in due if j.queue == queue]
            if fifo:
                ids = [j.id for j in queue_due]
                lookups.append(
                    broker.Lookup(broker.reconcile_members_key(queue, token), ids, sorted_set=False)
                )
            else:
                # A priority set is asked by member: a member for another enqueue
                # time (a stale duplicate) does not count as the job's place.
                members = [broker.ready_member(j.id, j.enqueued_at) for j in queue_due]
                lookups.append(broker.Lookup(broker.priority_key(queue), members))
        present: set[str] = set()
        for lookup, answers in zip(lookups, broker.contains(client, lookups), strict=True):
            found = (member for member, hit in zip(lookup.ids, answers, strict=True) if hit)
            present.update(broker.member_job_id(member) for member in found)

        intents = []
        for job in known:
            # A due job waiting in the retry set counts as present: a worker's
            # promotion moves it to the ready structure.
            if job.id in present:
                continue
            if job.relay_pending:
                # The relay will push it (its row is undispatched); adding it here too
                # would only race the relay.
                self._skip(SKIPPED_RELAY, job_id=job.id, queue=job.queue)
                continue
            if job.recent:
                # Within the grace window the job may be in flight rather than lost:
                # just promoted (take_due removed it from the retry set and the push
                # to the ready structure follows), or just dispatched and popped by a
                # worker whose claim is not committed yet, or pushed to a FIFO list
                # after our snapshot. Re-adding would only make a duplicate; if it is
                # really lost, the first run after the grace restores it.
                self._skip(SKIPPED_GRACE, job_id=job.id, queue=job.queue)
                continue
            intents.append(self._restore_intent(job))
        if intents and not self.dry_run:
            # A crash between the PostgreSQL page and this write restores nothing of
            # the page; the next run finds the same jobs missing and restores them.
            broker.restore(client, intents, staging_token=token)

    def _restore_intent(self, job: QueuedJob) -> broker.Intent:
        fifo = self.queues[job.queue]
        if not job.due:
            score = broker.due_score(job.next_retry_at)
            self._record(RESTORED_RETRY, job_id=job.id, queue=job.queue, structure="retry", score=score)
            return broker.Intent("schedule", job.id, job.queue, fifo, score)
        member = ""
        if fifo:
            score = broker.enqueue_order_score(job.enqueued_at)
            structure = "fifo"
        else:
            score = broker.ready_score(job.priority_value)
            member = broker.ready_member(job.id, job.enqueued_at)
            structure = "priority"
        self._record(RESTORED_READY, job_id=job.id, queue=job.queue, structure=structure, score=score)
        return broker.Intent("enqueue", job.id, job.queue, fifo, score, member)

    # --- helpers ---------------------------------------------------------------------

    def _pages(self, statement: str, params: dict) -> Iterator[list[tuple]]:
        """Keyset pagination by job id (the first column): each page is one short
        statement, so no snapshot is held for the whole run."""
        after = None
        while not self.stopping:
            rows = _fetch(statement, {**params, "after": after, "limit": self.batch_size})
            if rows:
                yield rows
                self._progress()
            if len(rows) < self.batch_size:
                return
            after = rows[-1][0]

    def _progress(self) -> None:
        now = time.monotonic()
        if now - self._last_progress < PROGRESS_EVERY_SECONDS:
            return
        self._last_progress = now
        done = {action: self._counts[action] for action in ACTIONS if self._counts[action]}
        log.info("reconcile_progress", dry_run=self.dry_run, seconds=round(now - self._started, 1), **done)
        so_far = " ".join(f"{action}={count}" for action, count in done.items()) or "nothing yet"
        self.report(f"reconcile progress after {now - self._started:.0f}s: {so_far}")

    def _record(self, action: str, **fields) -> None:
        self._count_and_log(action, "info", fields)
        if self.dry_run:
            details = " ".join(f"{name}={value}" for name, value in fields.items() if value is not None)
            self.report(f"would {_WOULD[action]}: {details}")

    def _skip(self, action: str, *, level: str = "debug", **fields) -> None:
        self._count_and_log(action, level, fields)

    def _count_and_log(self, action: str, level: str, fields: dict) -> None:
        """Count one action; log it at ``level`` if among the first of its kind this pass, else at debug."""
        self._counts[action] += 1
        count = self._counts[action]
        if count == CHANGES_LOGGED_PER_ACTION + 1 and level != "debug":
            log.info(
                "reconcile_detail_limited",
                action=action,
                dry_run=self.dry_run,
                detail="further actions of this kind are logged at debug; the summary counts them",
            )
        if count > CHANGES_LOGGED_PER_ACTION:
            level = "debug"
        getattr(log, level)(f"reconcile_{action}", dry_run=self.dry_run, **fields)

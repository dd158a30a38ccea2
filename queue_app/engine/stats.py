"""The queue's figures, read once: jobs by status and queue, outbox backlog, oldest due job, Redis depths.

One read model behind both ``/api/stats/`` and the admin dashboard; it
writes nothing. Every read stays bounded at a million jobs without indexes
beyond the job table's fixed set:

- each status's jobs are counted through the status index, stopping past
  ``EXACT_COUNT_LIMIT``: a status at or below it is counted exactly (per
  queue), a larger one is the planner's estimate from ANALYZE's statistics
  (at least the limit + 1), and ``estimated`` names it. Stale statistics
  thus never turn a small status into a large one. Before the first ANALYZE
  everything is counted;
- the outbox backlog is exact: the partial index on undispatched rows
  serves it;
- the oldest due job is found exactly while few jobs are queued; with more,
  only the ids first in line in Redis are looked up (ids are in enqueue
  order within one priority value and a list), so a job missing from Redis does not
  count until the reconciler restores it, and the age is marked estimated.
  If Redis does not answer, the queued jobs are read after all.

Ages use the database clock (statement_timestamp(), like Django's Now()), as leases and due times do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections, router

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import selectors, sql
from queue_app.engine.counts import EXACT_COUNT_LIMIT, estimated_count
from queue_app.models import Job
from queue_app.states import Status

# Figures that may be estimates, as named in ``QueueStats.estimated``.
OLDEST_QUEUED = "oldest_queued"


@dataclass(frozen=True)
class QueueStats:
    """A snapshot of both stores; counts cover every status and every configured queue."""

    taken_at: datetime  # the database's now()
    by_status: dict[str, int]  # every status
    by_queue: dict[str, dict[str, int]]  # queue -> status -> jobs; configured queues first
    scheduled: dict[str, int]  # queue -> queued jobs waiting for a time (retry backoff or run_at)
    estimated: frozenset[str]  # statuses (and OLDEST_QUEUED) given as estimates
    outbox_backlog: dict[str, tuple[int, datetime]]  # queue -> (pending rows, oldest pending)
    oldest_queued_at: datetime | None  # when the longest-waiting due job became ready
    redis: dict[str, dict[str, int]] | None  # queue -> structure -> ids; None when Redis did not answer
    redis_error: str | None

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def outbox_pending(self) -> int:
        return sum(pending for pending, _ in self.outbox_backlog.values())

    @property
    def outbox_oldest(self) -> datetime | None:
        return min((oldest for _, oldest in self.outbox_backlog.values()), default=None)

    def age(self, moment: datetime | None) -> timedelta | None:
        """How long ago ``moment`` was at ``taken_at``; None for None."""
        return None if moment is None else max(self.taken_at - moment, timedelta(0))


def _fetch(name: str, params: dict | None = None) -> list[tuple]:
    # The database the job table is read from: the replica inside a history page that reads it.
    with connections[router.db_for_read(Job)].cursor() as cursor:
        cursor.execute(sql.query(name), params or {})
        return cursor.fetchall()


def first_log_id_since(moment: datetime) -> int | None:
    """The first log row written at or after ``moment`` (None: nothing since), by bisecting
    the primary key in one statement: a range of the trail without an index on its time."""
    rows = _fetch("first_log_id_since", {"moment": moment})
    return rows[0][0] if rows else None


def _job_counts(now: datetime) -> tuple[dict[str, int], dict[str, dict[str, int]], dict[str, int], set[str]]:
    """(status -> jobs, queue -> status -> jobs, queue -> scheduled, estimated statuses)."""
    limit = EXACT_COUNT_LIMIT
    capped = dict(_fetch("job_status_capped_counts", {"statuses": Status.values, "cap": limit}))
    estimated = {status for status, jobs in capped.items() if jobs > limit}
    share: dict[str, dict[str, float]] = {"status": {}, "queue": {}}
    rows = 0.0
    if estimated:
        for column, value, freq, table_rows in _fetch("job_count_estimates"):
            share[column][value], rows = freq, table_rows
        if not share["status"]:
            estimated = set()  # never analysed: no estimate to give, so every status is counted
    by_status = {
        status: max(round(rows * share["status"].get(status, 0)), capped[status]) for status in estimated
    }
    by_queue: dict[str, dict[str, int]] = {}
    scheduled: dict[str, int] = {}
    # Columns are taken as independent, as the planner does: a status's jobs split in the
    # queues' shares (a queue too rare for ANALYZE's list shows only in the total).
    for status in estimated:
        for queue, freq in share["queue"].items():
            by_queue.setdefault(queue, {})[status] = round(by_status[status] * freq)
    exact = [status for status in Status.values if status not in estimated]
    for queue, status, jobs, waiting in _fetch("job_counts_by_queue", {"statuses": exact}):
        by_queue.setdefault(queue, {})[status] = jobs
        by_status[status] = by_status.get(status, 0) + jobs
        if status == Status.QUEUED:
            scheduled[queue] = waiting
    if Status.QUEUED in estimated:
        waiting = estimated_count(Job.objects.filter(status=Status.QUEUED, next_retry_at__gt=now))
        scheduled = {queue: round(waiting * freq) for queue, freq in share["queue"].items()}
    return by_status, by_queue, scheduled, estimated


def _oldest_queued(queues: list[tuple[str, bool]], queued_is_large: bool) -> tuple[datetime | None, bool]:
    """(when the oldest due job became ready, whether that is an estimate)."""
    if queued_is_large:
        try:
            heads = broker.ready_heads(broker.get_client(), queues)
        except broker.REDIS_ERRORS:
            pass  # no Redis: read the queued jobs after all
        else:
            # A head that names no job (garbage, or a FIFO list's rebuild marker once the
            # workers popped every id in front of it) is left out: it cannot be cast to a uuid.
            ids = [str(pk) for pk in selectors.valid_ids(heads)]
            return _fetch("oldest_due_queued_among", {"ids": ids})[0][0], True
    return _fetch("oldest_due_queued")[0][0], False


def _redis_depths(queues: list[tuple[str, bool]]) -> tuple[dict[str, dict[str, int]] | None, str | None]:
    try:
        return broker.depths(broker.get_client(), queues), None
    except broker.REDIS_ERRORS as exc:
        return None, f"{type(exc).__name__}: {exc}"


def queue_stats() -> QueueStats:
    """Everything both stores say about the queue, read once."""
    configured = queue_settings().QUEUES
    now = _fetch("database_now")[0][0]
    by_status, by_queue, scheduled, estimated = _job_counts(now)
    # Configured queues first, then any other queue the counts found; every status in each.
    names = list(configured) + sorted(set(by_queue) - set(configured))
    by_queue = {name: {s: by_queue.get(name, {}).get(s, 0) for s in Status.values} for name in names}
    queues = [(name, configured.get(name, False)) for name in names]
    oldest, oldest_is_estimate = _oldest_queued(queues, Status.QUEUED in estimated)
    depths, redis_error = _redis_depths(queues)
    backlog = _fetch("outbox_backlog_by_queue")
    return QueueStats(
        taken_at=now,
        by_status={status: by_status.get(status, 0) for status in Status.values},
        by_queue=by_queue,
        scheduled={name: scheduled.get(name, 0) for name in names},
        estimated=frozenset(estimated | ({OLDEST_QUEUED} if oldest_is_estimate else set())),
        outbox_backlog={queue: (pending, first) for queue, pending, first in backlog},
        oldest_queued_at=oldest,
        redis=depths,
        redis_error=redis_error,
    )

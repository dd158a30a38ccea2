"""What the queue dashboard shows: one read-only snapshot of PostgreSQL and Redis.

PostgreSQL says what should be queued; Redis says what a worker will find.
Showing both side by side makes drift visible: a queued job missing from
Redis waits for the relay (outbox backlog) or the reconciler; an id in Redis
without a queued job is absorbed by the worker's claim.

Counts, outbox backlog and Redis depths come from the engine's read model
(queue_app/engine/stats.py), the same one /api/stats/ serves: exact for a
status with few jobs, the planner's estimate for a large one. Throughput
and recent failures come from the log trail: each finishing transition
writes its log row in the transition's transaction, stamped with the same
``now()`` as ``completed_at``, and the log's primary key grows with time, so
"the last hour" is a primary-key range found by bisection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

from queue_app.admin import charts
from queue_app.conf import queue_settings
from queue_app.engine.stats import first_log_id_since, queue_stats
from queue_app.models import Job, JobLog
from queue_app.states import TRANSITIONS, Status

THROUGHPUT_MINUTES = 60
RECENT_FAILURES = 10
RECENT_FAILURES_WINDOW = timedelta(hours=24)
# Log events that finish a job, by the status they lead to.
COMPLETED_EVENTS = sorted(event for event, (_, target) in TRANSITIONS.items() if target == Status.COMPLETED)
FAILED_EVENTS = sorted(event for event, (_, target) in TRANSITIONS.items() if target == Status.FAILED)


@dataclass(frozen=True)
class QueueDepth:
    """One queue: PostgreSQL's counts next to the ids Redis holds for it."""

    name: str
    fifo: bool
    statuses: dict[str, int]
    estimated: frozenset[str]  # statuses whose count is the planner's estimate
    scheduled: int  # queued, but waiting for a time (retry backoff or run_at)
    outbox_pending: int
    redis: dict[str, int] | None  # None when Redis could not be read

    @property
    def status_counts(self) -> list[tuple[str, int, bool]]:
        """(status, count, is_estimate) for every status, in the states' order."""
        return [(status, self.statuses.get(status, 0), status in self.estimated) for status in Status.values]

    @property
    def queued(self) -> int:
        return self.statuses.get(Status.QUEUED, 0)

    @property
    def redis_total(self) -> int | None:
        return None if self.redis is None else sum(self.redis.values())

    @property
    def drift(self) -> int | None:
        """Redis ids minus queued jobs: 0 when the stores agree; None unless both are known exactly."""
        if self.redis is None or Status.QUEUED in self.estimated:
            return None
        return self.redis_total - self.queued


@dataclass(frozen=True)
class Minute:
    start: datetime
    completed: int
    failed: int


@dataclass(frozen=True)
class Failure:
    job_id: str
    type: str
    queue: str
    failed_at: datetime
    event: str
    error: str


@dataclass(frozen=True)
class Snapshot:
    taken_at: datetime
    queues: list[QueueDepth]
    throughput: list[Minute]
    recent_failures: list[Failure]
    outbox_pending: int
    outbox_oldest: datetime | None
    totals: dict[str, int] = field(default_factory=dict)
    estimated: frozenset[str] = frozenset()  # statuses whose total is an estimate
    redis_error: str = ""

    @property
    def status_totals(self) -> list[tuple[str, int, bool]]:
        return [(status, count, status in self.estimated) for status, count in self.totals.items()]

    @property
    def total_jobs(self) -> int:
        return sum(self.totals.values())

    @property
    def outbox_oldest_age(self) -> timedelta | None:
        return None if self.outbox_oldest is None else max(self.taken_at - self.outbox_oldest, timedelta(0))

    @property
    def completed_last_hour(self) -> int:
        return sum(minute.completed for minute in self.throughput)

    @property
    def failed_last_hour(self) -> int:
        return sum(minute.failed for minute in self.throughput)


def _throughput(now: datetime) -> list[Minute]:
    """Jobs finished per minute over the last hour, oldest minute first, empty minutes included."""
    first = now.replace(second=0, microsecond=0) - timedelta(minutes=THROUGHPUT_MINUTES - 1)
    minutes = [first + timedelta(minutes=i) for i in range(THROUGHPUT_MINUTES)]
    since_id = first_log_id_since(first)
    counts: dict[tuple[datetime, str], int] = {}
    if since_id is not None:
        rows = (
            JobLog.objects.filter(
                id__gte=since_id, created_at__gte=first, event__in=COMPLETED_EVENTS + FAILED_EVENTS
            )
            .annotate(minute=TruncMinute("created_at"))
            .order_by()
            .values("minute", "event")
            .annotate(jobs=Count("pk"))
        )
        for row in rows:
            outcome = Status.COMPLETED if row["event"] in COMPLETED_EVENTS else Status.FAILED
            key = (row["minute"], outcome)
            counts[key] = counts.get(key, 0) + row["jobs"]
    return [
        Minute(
            start=minute,
            completed=counts.get((minute, Status.COMPLETED), 0),
            failed=counts.get((minute, Status.FAILED), 0),
        )
        for minute in minutes
    ]


def _recent_failures(now: datetime) -> list[Failure]:
    """The last jobs to fail for good within RECENT_FAILURES_WINDOW, newest first."""
    since_id = first_log_id_since(now - RECENT_FAILURES_WINDOW)
    if since_id is None:
        return []
    entries = list(
        JobLog.objects.filter(id__gte=since_id, event__in=FAILED_EVENTS)
        .order_by("-id")
        .values_list("job_id", "created_at", "event", "message")[:RECENT_FAILURES]
    )
    jobs = Job.objects.only("type", "queue").in_bulk([job_id for job_id, *_ in entries])
    return [
        Failure(
            job_id=str(job_id),
            type=jobs[job_id].type,
            queue=jobs[job_id].queue,
            failed_at=created_at,
            event=event,
            error=message,
        )
        for job_id, created_at, event, message in entries
        if job_id in jobs
    ]


def snapshot() -> Snapshot:
    """Everything the dashboard draws, read once."""
    stats = queue_stats()
    configured = queue_settings().QUEUES
    statuses = frozenset(stats.estimated & set(Status.values))
    queues = [
        QueueDepth(
            name=name,
            fifo=configured.get(name, False),
            statuses=counts,
            estimated=statuses,
            scheduled=stats.scheduled.get(name, 0),
            outbox_pending=stats.outbox_backlog.get(name, (0, None))[0],
            redis=None if stats.redis is None else stats.redis.get(name),
        )
        for name, counts in stats.by_queue.items()
    ]
    return Snapshot(
        taken_at=stats.taken_at,
        queues=queues,
        throughput=_throughput(stats.taken_at),
        recent_failures=_recent_failures(stats.taken_at),
        outbox_pending=stats.outbox_pending,
        outbox_oldest=stats.outbox_oldest,
        totals=stats.by_status,
        estimated=statuses,
        redis_error=f"Redis could not be read: {stats.redis_error}" if stats.redis_error else "",
    )


def status_chart(snap: Snapshot) -> str:
    return charts.grouped_bars(
        [
            charts.BarGroup(status, [charts.Bar("", count, charts.STATUS_COLOURS[status])])
            for status, count in snap.totals.items()
        ],
        label="Jobs by status",
    )


def depth_chart(snap: Snapshot) -> str:
    """Per queue: queued in PostgreSQL next to the ids in Redis."""
    groups = []
    for queue in snap.queues:
        bars = [charts.Bar("queued in PostgreSQL", queue.queued, charts.POSTGRES_COLOUR)]
        if queue.redis_total is not None:
            bars.append(charts.Bar("ids in Redis", queue.redis_total, charts.REDIS_COLOUR))
        groups.append(charts.BarGroup(queue.name, bars))
    return charts.grouped_bars(
        groups,
        label="Queued jobs in PostgreSQL and ids in Redis, per queue",
        legend=[("queued in PostgreSQL", charts.POSTGRES_COLOUR), ("ids in Redis", charts.REDIS_COLOUR)],
    )


def throughput_chart(snap: Snapshot) -> str:
    columns = [
        charts.Column(timezone.localtime(minute.start).strftime("%H:%M"), [minute.completed, minute.failed])
        for minute in snap.throughput
    ]
    return charts.stacked_columns(
        columns,
        series=[
            ("completed", charts.STATUS_COLOURS["completed"]),
            ("failed", charts.STATUS_COLOURS["failed"]),
        ],
        label="Jobs finished per minute over the last hour",
    )

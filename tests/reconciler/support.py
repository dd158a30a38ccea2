"""Helpers for the reconciler tests: seeding jobs, backdating the relay, reading stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

from queue_app import broker, services
from queue_app.models import Job
from queue_app.services import JobRequest

QUEUES = {"default": False, "bulk": True}


def enqueue(count: int, **fields) -> list[Job]:
    """Create ``count`` probe jobs through the service layer."""
    return services.enqueue_jobs([JobRequest(type="probe.run", **fields) for _ in range(count)])


def mark_relayed(*, seconds_ago: float = 3600) -> None:
    """As if the relay had dispatched every pending outbox row that long ago."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_job_outbox SET dispatched_at = now() - make_interval(secs => %s) "
            "WHERE dispatched_at IS NULL",
            [seconds_ago],
        )


def set_fields(job_ids, **values) -> None:
    """Test set-up only: put rows into a state no service call reaches quickly."""
    Job.objects.filter(id__in=list(job_ids)).update(**values)


def expected_place(job: Job, fifo: bool) -> tuple[str, str, float | None]:
    """(key, member, score) where a queued job belongs; FIFO list entries have no score."""
    job.refresh_from_db()
    if job.next_retry_at is not None and job.next_retry_at > timezone.now():
        return broker.retry_key(job.queue), str(job.id), job.next_retry_at.timestamp()  # due epoch seconds
    if fifo:
        return broker.fifo_key(job.queue), str(job.id), None
    # Worked out here, not by ready_score: the score is the negated priority (the REST
    # tiers are 10, 0 and -10); the member's enqueue time orders equal scores.
    score = -{"high": 10, "medium": 0, "low": -10}[job.priority]
    return broker.priority_key(job.queue), expected_member(job), score


def expected_member(job: Job) -> str:
    """A ready job's member: 16 digits of µs since 2020-01-01, a colon, its id."""
    micros = (job.enqueued_at - datetime(2020, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return f"{micros:016d}:{job.id}"


def redis_state(client) -> dict:
    """Every key of the test database with its full contents (order kept for lists)."""
    state = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key)
        if kind == "zset":
            state[key] = client.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            state[key] = client.lrange(key, 0, -1)
        elif kind == "set":
            state[key] = sorted(client.smembers(key))
        else:
            state[key] = client.dump(key)
    return state


def database_state() -> dict:
    """Jobs, log rows and outbox rows, compared whole."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, status, attempts, next_retry_at, enqueued_at, lease_expires_at, worker_id "
            "FROM queue_app_jobs ORDER BY id"
        )
        jobs = cursor.fetchall()
        cursor.execute("SELECT job_id, event FROM queue_app_job_logs ORDER BY id")
        logs = cursor.fetchall()
        cursor.execute("SELECT job_id, action, score, dispatched_at FROM queue_app_job_outbox ORDER BY id")
        outbox = cursor.fetchall()
    return {"jobs": jobs, "logs": logs, "outbox": outbox}


def ago(seconds: float):
    return timezone.now() - timedelta(seconds=seconds)

"""The figures behind /api/stats/: PostgreSQL is counted, Redis is only measured."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import redis
from django.db.models import Count, DurationField, ExpressionWrapper, Min
from django.db.models.functions import Now
from django.utils import timezone

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.models import Job, OutboxMessage
from queue_app.states import Status


def _seconds(age: timedelta | None) -> float | None:
    return None if age is None else max(age.total_seconds(), 0.0)


def _age_of_oldest(column: str):
    # Ages use the database clock, like leases and due times.
    return ExpressionWrapper(Now() - Min(column), output_field=DurationField())


def job_counts() -> dict[str, Any]:
    """Counts by status and by queue; configured queues and every status appear, even at 0."""
    by_status = dict.fromkeys(Status.values, 0)
    by_queue = {queue: dict.fromkeys(Status.values, 0) for queue in queue_settings().QUEUES}
    rows = Job.objects.order_by().values_list("queue", "status").annotate(count=Count("*"))
    for queue, status, count in rows:
        by_status[status] = by_status.get(status, 0) + count
        by_queue.setdefault(queue, dict.fromkeys(Status.values, 0))[status] = count
    return {"total": sum(by_status.values()), "by_status": by_status, "by_queue": by_queue}


def oldest_queued_age() -> float | None:
    """Seconds the longest-waiting due job has waited since it became ready.

    A job scheduled for later is not waiting yet: its ``enqueued_at`` is its due time.
    """
    aggregate = Job.objects.filter(status=Status.QUEUED, enqueued_at__lte=Now()).aggregate(
        age=_age_of_oldest("enqueued_at")
    )
    return _seconds(aggregate["age"])


def outbox_backlog() -> dict[str, Any]:
    aggregate = OutboxMessage.objects.filter(dispatched_at__isnull=True).aggregate(
        pending=Count("*"), age=_age_of_oldest("created_at")
    )
    return {"pending": aggregate["pending"], "oldest_pending_age_seconds": _seconds(aggregate["age"])}


def redis_depths() -> tuple[dict[str, dict[str, int]] | None, str | None]:
    """Ids in each Redis structure by queue, or (None, error) when Redis does not answer."""
    queues = list(queue_settings().QUEUES.items())
    try:
        return broker.depths(broker.get_client(), queues), None
    except redis.RedisError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def collect() -> dict[str, Any]:
    depths, error = redis_depths()
    return {
        "generated_at": timezone.now(),
        "jobs": job_counts(),
        "oldest_queued_age_seconds": oldest_queued_age(),
        "outbox": outbox_backlog(),
        "redis": depths,
        "redis_error": error,
    }

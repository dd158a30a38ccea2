"""The outbox rows services write and the NOTIFY that wakes the relay at commit."""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from queue_app import broker
from queue_app.engine import sql
from queue_app.models import Job, OutboxMessage


def ready_intent(job: Job) -> OutboxMessage:
    """The outbox row that puts a queued job where a worker finds it."""
    if job.next_retry_at is not None:
        return OutboxMessage(
            job_id=job.id,
            action=OutboxMessage.Action.SCHEDULE,
            queue=job.queue,
            score=broker.due_score(job.next_retry_at),
        )
    return enqueue_intent(job.id, job.queue, job.priority, job.enqueued_at)


def enqueue_intent(job_id, queue: str, priority: str, enqueued_at: datetime) -> OutboxMessage:
    """The outbox row that makes a job ready: its tier, then its enqueue time."""
    return OutboxMessage(
        job_id=job_id,
        action=OutboxMessage.Action.ENQUEUE,
        queue=queue,
        score=broker.ready_score(priority, enqueued_at),
    )


def notify_relay() -> None:
    """Wake the relays when the surrounding transaction commits."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("notify_relay"))

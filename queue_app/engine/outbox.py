"""The outbox rows services write and the NOTIFY that wakes the relay at commit."""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from queue_app import broker
from queue_app.engine import sql
from queue_app.models import Job, OutboxMessage


def ready_intent(job: Job) -> OutboxMessage:
    """The outbox row that puts a queued job where a worker finds it."""
    action, score, member = ready_placement(job.id, job.priority_value, job.enqueued_at, job.next_retry_at)
    return OutboxMessage(job_id=job.id, action=action, queue=job.queue, score=score, member=member)


def ready_placement(
    job_id, priority_value: int, enqueued_at: datetime, next_retry_at: datetime | None
) -> tuple[str, float, str]:
    """The outbox action, score and member of a queued job: the retry set until it is due, else ready."""
    if next_retry_at is not None:
        return OutboxMessage.Action.SCHEDULE.value, broker.due_score(next_retry_at), ""
    return (
        OutboxMessage.Action.ENQUEUE.value,
        broker.ready_score(priority_value),
        broker.ready_member(job_id, enqueued_at),
    )


def enqueue_intent(
    job_id, queue: str, priority_value: int, enqueued_at: datetime, *, to_head: bool = False
) -> OutboxMessage:
    """The outbox row that makes a job ready: its priority, then its enqueue time (on a
    strict-FIFO list: appended, or ``to_head`` put first)."""
    return OutboxMessage(
        job_id=job_id,
        action=OutboxMessage.Action.ENQUEUE,
        queue=queue,
        score=broker.ready_score(priority_value),
        member=broker.ready_member(job_id, enqueued_at),
        to_head=to_head,
    )


def remove_intent(job_id, queue: str, enqueued_at: datetime) -> OutboxMessage:
    """The outbox row that takes a job out of Redis: its ready member names it exactly."""
    return OutboxMessage(
        job_id=job_id,
        action=OutboxMessage.Action.REMOVE,
        queue=queue,
        member=broker.ready_member(job_id, enqueued_at),
    )


def notify_relay() -> None:
    """Wake the relays when the surrounding transaction commits."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("notify_relay"))

"""Reads the processes need to decide what to do; nothing here writes."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.utils import timezone

from queue_app.engine import sql
from queue_app.ids import parse_job_id
from queue_app.models import Job
from queue_app.states import RUNNING, Status


def database_now() -> datetime:
    """PostgreSQL's clock (the statement's start): what leases and due times are compared with."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("database_now"))
        return cursor.fetchone()[0]


def valid_ids(ids: Iterable[str]) -> list[uuid.UUID]:
    """The ids that parse as UUIDs (anything else cannot name a job)."""
    return [parsed for parsed in map(parse_job_id, ids) if parsed is not None]


def statuses(ids: Iterable[str]) -> dict[str, str]:
    """id -> status for the ids that exist."""
    return {
        str(pk): status
        for pk, status in Job.objects.filter(id__in=valid_ids(ids)).values_list("id", "status")
    }


def queued_for_promotion(ids: Iterable[str]) -> list[tuple[str, str, int, datetime, datetime | None]]:
    """(id, queue, priority_value, enqueued_at, next_retry_at) of the queued jobs among ``ids``
    that may go to Redis: a parked job waits out of it for its key's turn."""
    rows = Job.objects.filter(id__in=valid_ids(ids), status=Status.QUEUED, parked=False).values_list(
        "id", "queue", "priority_value", "enqueued_at", "next_retry_at"
    )
    return [(str(pk), *rest) for pk, *rest in rows]


def not_due(ids: Iterable[str]) -> list[tuple[str, str, datetime]]:
    """(id, queue, due) of queued jobs among ``ids`` whose time has not come yet."""
    rows = Job.objects.filter(
        id__in=valid_ids(ids), status=Status.QUEUED, next_retry_at__gt=timezone.now()
    ).values_list("id", "queue", "next_retry_at")
    return [(str(pk), queue, due) for pk, queue, due in rows]


def has_queued(queues: Sequence[str]) -> bool:
    """Whether any job of these queues is still waiting to run (now or later)."""
    return Job.objects.filter(queue__in=list(queues), status=Status.QUEUED).exists()


def has_due(queues: Sequence[str]) -> bool:
    """Whether any job of these queues is waiting and may run now (not scheduled later)."""
    return (
        Job.objects.filter(queue__in=list(queues), status=Status.QUEUED)
        .filter(Q(next_retry_at__isnull=True) | Q(next_retry_at__lte=Now()))
        .exists()
    )


def running_attempt(job_id: str, fence: int) -> int | None:
    """The attempt number of the running job ``job_id`` if ``fence`` still holds it."""
    return (
        Job.objects.filter(id=job_id, status=Status.PROCESSING, fence=fence)
        .values_list("attempts", flat=True)
        .first()
    )


def held_by(worker_id: str) -> list[tuple[str, int]]:
    """(id, fence) of the jobs a worker identity holds, latest enqueued first: handed back
    in this order, strict-FIFO jobs end up at the head of their list in enqueue order."""
    rows = (
        Job.objects.filter(status__in=RUNNING, worker_id=worker_id)
        .order_by("-enqueued_at", "-id")
        .values_list("id", "fence")
    )
    return [(str(pk), fence) for pk, fence in rows]


def held_by_with_lease(worker_id: str) -> list[tuple[str, int, bool]]:
    """(id, fence, lease expired) of the jobs a worker identity holds, as ``held_by`` orders them."""
    rows = (
        Job.objects.filter(status__in=RUNNING, worker_id=worker_id)
        .order_by("-enqueued_at", "-id")
        .annotate(expired=ExpressionWrapper(Q(lease_expires_at__lt=Now()), output_field=BooleanField()))
        .values_list("id", "fence", "expired")
    )
    return [(str(pk), fence, bool(expired)) for pk, fence, expired in rows]

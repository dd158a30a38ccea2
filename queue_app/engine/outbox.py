"""The outbox rows services write, the NOTIFY that wakes the relay at commit, and the
relay's claims on the rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class JobNow:
    """A job as a relay's claim read it: what decides where it belongs in Redis now."""

    status: str
    queue: str
    priority_value: int
    enqueued_at: datetime
    next_retry_at: datetime | None


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    """One outbox row a relay claimed, with its job as the claim read it."""

    id: int
    job_id: str
    action: str
    queue: str
    # The ready member the row was written for ("" for a schedule row, or a row from
    # before members): the job's place at the time, which may have changed since.
    member: str
    to_head: bool
    # Its job may be in Redis already from this row: its enqueuer pushed it at commit,
    # or a relay claimed it before and died before marking it.
    pushed: bool
    job: JobNow
    # The job row's version (xmin) the claim read; compared again when the claim ends.
    job_version: str


@dataclass(frozen=True, slots=True)
class OutboxClaim:
    """A relay's batch: its rows, and the end of the claim, which also tells them apart
    from rows another relay claimed later."""

    rows: list[ClaimedRow]
    until: datetime | None


def claim_outbox(*, limit: int, claim_seconds: float, fifo_queues: Iterable[str]) -> OutboxClaim:
    """Claim up to ``limit`` due rows for ``claim_seconds``, in one short transaction of its
    own: nothing stays locked while the relay pushes (``claim_outbox`` in sql/outbox.sql)."""
    params = {"limit": limit, "claim_seconds": claim_seconds, "fifo_queues": list(fifo_queues)}
    with connection.cursor() as cursor:
        cursor.execute(sql.query("claim_outbox"), params)
        found = cursor.fetchall()
    rows = [
        ClaimedRow(row_id, str(job_id), action, queue, member, to_head, pushed, JobNow(*job), version)
        for row_id, job_id, action, queue, member, to_head, pushed, _, *job, version in found
    ]
    return OutboxClaim(rows, found[0][7] if found else None)


def finish_outbox_claim(claim: OutboxClaim) -> tuple[int, int]:
    """Once the push is done: (rows marked dispatched, rows due again at once because their
    job changed while the push was on its way)."""
    if not claim.rows:
        return 0, 0
    params = {
        "ids": [row.id for row in claim.rows],
        "versions": [row.job_version for row in claim.rows],
        "claimed_until": claim.until,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql.query("finish_outbox_claim"), params)
        marked = [dispatched for (dispatched,) in cursor.fetchall()]
    return marked.count(True), marked.count(False)


def release_outbox_claim(claim: OutboxClaim) -> None:
    """The push failed: the rows are due again at once (not at the claim's end)."""
    if claim.rows:
        params = {"ids": [row.id for row in claim.rows], "claimed_until": claim.until}
        with connection.cursor() as cursor:
            cursor.execute(sql.query("release_outbox_claim"), params)

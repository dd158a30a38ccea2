"""Running jobs: the claim, completions, failures and leases, fenced by ``jobs.fence``.

``fence`` goes up by one on every claim and never down; ``attempts`` counts the
claims charged to the job (a hand-back takes one back). Every write made for a
running attempt is conditional on the fence value its claim returned.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from django.db import connection, transaction

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import selectors, sql
from queue_app.engine.outbox import enqueue_intent, notify_relay
from queue_app.handlers import get_handler
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.states import Status

log = structlog.get_logger("queue_app.services")


@dataclass(frozen=True)
class ClaimedJob:
    id: str
    type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    fence: int


def claim_jobs(ids: Sequence[str], *, worker_id: str) -> list[ClaimedJob]:
    """Compare-and-set claim of popped ids in one statement; others are logged and dropped.

    Two workers claiming one id: the second UPDATE waits for the first's row
    lock, re-checks ``status = 'queued'`` and skips the row.
    """
    if not ids:
        return []
    lease = queue_settings().LEASE_SECONDS
    valid_ids = [str(pk) for pk in selectors.valid_ids(ids)]
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(sql.query("claim_jobs"), {"ids": valid_ids, "worker": worker_id, "lease": lease})
        rows = cursor.fetchall()
    # Run in pop order (priority, then age); RETURNING order is unspecified.
    position = {job_id: index for index, job_id in enumerate(valid_ids)}
    rows.sort(key=lambda row: position[str(row[0])])
    claimed = [
        ClaimedJob(
            id=str(row[0]),
            type=row[1],
            queue=row[2],
            payload=json.loads(row[3]) if isinstance(row[3], str) else row[3],
            attempt=row[4],
            max_attempts=row[5],
            fence=row[6],
        )
        for row in rows
    ]
    if claimed:
        log.info("jobs_claimed", count=len(claimed), worker=worker_id)
    if len(claimed) < len(set(ids)):
        _log_unclaimed(set(ids) - {job.id for job in claimed})
    return claimed


def mark_started(job_id: str, fence: int) -> None:
    """Set started_at to now for a claimed job that starts later than its claim."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("mark_started"), {"id": job_id, "fence": fence})


def _log_unclaimed(ids: set[str]) -> None:
    found = selectors.statuses(ids)
    for job_id in ids:
        if job_id not in found:
            log.warning("job_not_found_in_db", job_id=job_id)
        else:
            log.warning("job_status_not_queued", job_id=job_id, status=found[job_id])


@dataclass(frozen=True)
class Completion:
    job_id: str
    fence: int
    result: Any


_COMPLETE_SQL = """
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint, result jsonb)
), done AS (
    UPDATE jobs
       SET status = 'completed', result = input.result, completed_at = now(),
           last_error = '', worker_id = '', lease_expires_at = NULL
      FROM input
     WHERE jobs.id = input.id AND jobs.status = 'processing' AND jobs.fence = input.fence
 RETURNING jobs.id, jobs.attempts
), logged AS (
    INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
    SELECT id, now(), 'info', 'completed', '', jsonb_build_object('attempt', attempts) FROM done
)
SELECT id FROM done
"""


def complete_jobs(completions: Sequence[Completion]) -> set[str]:
    """Complete many jobs in one statement; returns the ids the fence let through.

    A job cancelled, rescued or re-claimed since this attempt began keeps its
    state: its result is not written, and a 'completion_fenced' row says so.
    """
    if not completions:
        return set()
    rows = [{"id": c.job_id, "fence": c.fence, "result": c.result} for c in completions]
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cursor:
            cursor.execute(_COMPLETE_SQL, {"rows": json.dumps(rows)})
            done = {str(row[0]) for row in cursor.fetchall()}
        fenced = [c for c in completions if c.job_id not in done]
        if fenced:
            _record_fenced(fenced, "completion_fenced")
    for job_id in done:
        log.debug("job_completed", job_id=job_id)
    if done:
        log.info("jobs_completed", count=len(done))
    return done


def complete_job(job_id: str, fence: int, result: Any) -> bool:
    """Complete one job; False when the fence rejected it (see ``complete_jobs``)."""
    return bool(complete_jobs([Completion(job_id, fence, result)]))


def note_fenced(job_id: str, fence: int) -> None:
    """Record that an attempt's completion was rejected (after its atomic work rolled back)."""
    with transaction.atomic():
        _record_fenced([Completion(job_id, fence, None)], "completion_fenced")


def _record_fenced(items: Sequence[Completion], event: str) -> None:
    existing = set(
        str(pk) for pk in Job.objects.filter(id__in=[c.job_id for c in items]).values_list("id", flat=True)
    )
    JobLog.objects.bulk_create(
        JobLog(
            job_id=c.job_id,
            level=JobLog.Level.WARNING,
            event=event,
            message="attempt no longer holds the job; nothing written",
            extra={"fence": c.fence},
        )
        for c in items
        if c.job_id in existing
    )
    for c in items:
        log.warning(event, job_id=c.job_id, fence=c.fence)


def retry_delay(attempt: int, *, base: float, cap: float) -> float:
    """Exponential backoff with jitter: uniform in [d/2, d], d = min(cap, base * 2**(attempt-1))."""
    delay = min(cap, base * 2 ** max(attempt - 1, 0))
    return random.uniform(delay / 2, delay)


_SETTLE_FAILURE_SQL = """
UPDATE jobs
   SET status = CASE WHEN %(retry)s AND attempts < max_attempts THEN 'queued' ELSE 'failed' END,
       next_retry_at = CASE WHEN %(retry)s AND attempts < max_attempts
                            THEN now() + make_interval(secs => %(delay)s) END,
       enqueued_at = CASE WHEN %(retry)s AND attempts < max_attempts
                          THEN now() + make_interval(secs => %(delay)s) ELSE enqueued_at END,
       completed_at = CASE WHEN %(retry)s AND attempts < max_attempts THEN NULL ELSE now() END,
       last_error = %(error)s, worker_id = '', lease_expires_at = NULL
 WHERE {condition}
RETURNING id, status, attempts, queue, next_retry_at
"""


def _settle_failures(
    condition: str, params: dict, *, error: str, retry: bool, delay: float, events: tuple[str, str]
) -> list[tuple]:
    """Shared by a handler error and a lease rescue: retry with backoff or fail for good."""
    with connection.cursor() as cursor:
        cursor.execute(
            _SETTLE_FAILURE_SQL.format(condition=condition),
            {**params, "retry": retry, "delay": delay, "error": error[:10_000]},
        )
        rows = cursor.fetchall()
    retry_event, fail_event = events
    logs, outbox = [], []
    for job_id, status, attempts, queue, next_retry_at in rows:
        if status == Status.QUEUED:
            logs.append(
                JobLog(
                    job_id=job_id,
                    level=JobLog.Level.WARNING,
                    event=retry_event,
                    message=error[:2000],
                    extra={"attempt": attempts, "next_retry_at": next_retry_at.isoformat()},
                )
            )
            outbox.append(
                OutboxMessage(
                    job_id=job_id,
                    action=OutboxMessage.Action.SCHEDULE,
                    queue=queue,
                    score=broker.due_score(next_retry_at),
                )
            )
        else:
            logs.append(
                JobLog(
                    job_id=job_id,
                    level=JobLog.Level.ERROR,
                    event=fail_event,
                    message=error[:2000],
                    extra={"attempt": attempts},
                )
            )
    JobLog.objects.bulk_create(logs)
    if outbox:
        OutboxMessage.objects.bulk_create(outbox)
        notify_relay()
    return rows


def fail_job(job_id: str, fence: int, error: str, *, retry: bool = True) -> str | None:
    """Record a failed attempt: back to queued after a backoff, or failed when none are left.

    Returns the new status, or None when the fence rejected the write.
    """
    spec = _spec_or_none(job_id)
    settings = queue_settings()
    base = (spec and spec.retry_backoff_base) or settings.RETRY_BACKOFF_BASE_SECONDS
    cap = (spec and spec.retry_backoff_max) or settings.RETRY_BACKOFF_MAX_SECONDS
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT attempts FROM jobs WHERE id = %s AND status = 'processing' AND fence = %s",
                [job_id, fence],
            )
            row = cursor.fetchone()
        rows = (
            _settle_failures(
                "id = %(id)s AND status = 'processing' AND fence = %(fence)s",
                {"id": job_id, "fence": fence},
                error=error,
                retry=retry,
                delay=retry_delay(row[0], base=base, cap=cap),
                events=("retry_scheduled", "failed"),
            )
            if row
            else []
        )
        if not rows:
            _record_fenced([Completion(job_id, fence, None)], "failure_fenced")
            return None
    status, attempt = rows[0][1], rows[0][2]
    log.info(
        "job_retry_scheduled" if status == Status.QUEUED else "job_failed", job_id=job_id, attempt=attempt
    )
    return status


def _spec_or_none(job_id: str):
    job_type = Job.objects.filter(id=job_id).values_list("type", flat=True).first()
    try:
        return get_handler(job_type)
    except Exception:  # noqa: BLE001 - an unregistered type just uses the defaults
        return None


def rescue_expired_leases(limit: int = 1000) -> list[tuple]:
    """Jobs whose worker stopped heartbeating: the attempt counts as failed.

    The fence stays, so a paused worker that wakes up later cannot write over
    the next attempt (whose claim raises it).
    """
    settings = queue_settings()
    with transaction.atomic():
        rows = _settle_failures(
            "id IN (SELECT id FROM jobs WHERE status = 'processing' AND lease_expires_at < now()"
            " ORDER BY lease_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)",
            {"limit": limit},
            error="lease expired: the worker stopped heartbeating",
            retry=True,
            delay=settings.RETRY_BACKOFF_BASE_SECONDS,
            events=("lease_expired_requeued", "lease_expired_failed"),
        )
    for job_id, status, attempts, *_ in rows:
        log.warning("lease_expired", job_id=str(job_id), attempt=attempts, status=status)
    return rows


def extend_leases(held: Sequence[tuple[str, int]], *, worker_id: str) -> set[str]:
    """Heartbeat: push out the leases of ``held`` (id, fence) this worker still holds;
    returns the ids still held."""
    if not held:
        return set()
    rows = [{"id": job_id, "fence": fence} for job_id, fence in held]
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
              FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint)
             WHERE jobs.id = t.id AND jobs.fence = t.fence
               AND jobs.status = 'processing' AND jobs.worker_id = %(worker)s
            RETURNING jobs.id
            """,
            {"rows": json.dumps(rows), "worker": worker_id, "lease": queue_settings().LEASE_SECONDS},
        )
        return {str(row[0]) for row in cursor.fetchall()}


def hand_back_job(job_id: str, fence: int, *, worker_id: str, reason: str) -> bool:
    """Return a running job to the queue unrun (clean shutdown): the attempt is not counted.

    Safe because the caller is the process that ran the attempt and has
    stopped it; the fence makes it a no-op if the job moved on meanwhile.
    ``attempts`` goes back down, ``fence`` does not: the next claim gets a
    token no earlier holder ever had.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                """
                UPDATE jobs SET status = 'queued', attempts = attempts - 1, worker_id = '',
                       lease_expires_at = NULL, started_at = NULL
                 WHERE id = %s AND status = 'processing' AND fence = %s AND worker_id = %s
                RETURNING id, queue, priority, enqueued_at, attempts
                """,
                [job_id, fence, worker_id],
            )
            row = cursor.fetchone()
        if row is None:
            log.info("hand_back_skipped", job_id=job_id, fence=fence)
            return False
        _, queue, priority, enqueued_at, attempts = row
        JobLog.objects.create(
            job_id=job_id,
            event="handed_back",
            message=reason,
            extra={"attempt": attempts + 1, "fence": fence},
        )
        enqueue_intent(job_id, queue, priority, enqueued_at).save()
        notify_relay()
    log.info("job_handed_back", job_id=job_id, fence=fence, reason=reason)
    return True

"""Creating jobs: validation, idempotency keys, and the enqueue transaction."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import structlog
from django.db import IntegrityError, transaction
from django.utils import timezone

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine.outbox import notify_relay, ready_intent
from queue_app.exceptions import (
    IdempotencyConflict,
    IdempotencyKeyInUse,
    InvalidJob,
    JobsRejected,
    QueueError,
)
from queue_app.handlers import get_handler
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.payloads import check_json
from queue_app.states import INITIAL_EVENT, Priority

log = structlog.get_logger("queue_app.services")

MAX_ATTEMPTS_LIMIT = 100
# A job may be scheduled up to the last time the priority score orders exactly.
LATEST_RUN_AT = broker.LATEST_EXACT_TIME


def check_run_at(run_at: datetime, *, field: str = "run_at") -> None:
    """Refuse a start beyond LATEST_RUN_AT; ``field`` names what the caller gave (run_at or a delay)."""
    if run_at > LATEST_RUN_AT:
        raise InvalidJob(
            f"must not start later than {LATEST_RUN_AT.isoformat()} (the queue's ordering ends there)",
            field=field,
        )


@dataclass
class JobRequest:
    """One job to create; validated by ``enqueue_jobs`` before anything is written."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    priority: str = Priority.MEDIUM
    queue: str = "default"
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    # The django.tasks backend alias enqueuing it, if any.
    backend: str = ""

    def fingerprint(self) -> str:
        body = [self.type, self.payload, self.priority, self.queue, self.max_attempts]
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _validated(request: JobRequest) -> JobRequest:
    settings = queue_settings()
    spec = get_handler(request.type)
    if request.priority not in Priority.values:
        raise InvalidJob(f"must be one of {', '.join(Priority.values)}", field="priority")
    if request.queue not in settings.QUEUES:
        raise InvalidJob(f"must be one of {', '.join(settings.QUEUES)}", field="queue")
    if not isinstance(request.payload, dict):
        raise InvalidJob("must be a JSON object", field="payload")
    check_json(
        request.payload,
        field="payload",
        max_bytes=settings.MAX_PAYLOAD_BYTES,
        max_depth=settings.MAX_PAYLOAD_DEPTH,
    )
    max_attempts = request.max_attempts
    if max_attempts is None:
        max_attempts = spec.max_attempts or settings.DEFAULT_MAX_ATTEMPTS
    if (
        not isinstance(max_attempts, int)
        or isinstance(max_attempts, bool)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidJob(f"must be an integer between 1 and {MAX_ATTEMPTS_LIMIT}", field="max_attempts")
    if request.run_at is not None:
        if timezone.is_naive(request.run_at):
            raise InvalidJob("must include a UTC offset", field="run_at")
        check_run_at(request.run_at)
    key = request.idempotency_key
    if key is not None:
        if not isinstance(key, str) or not 1 <= len(key) <= 255:
            raise InvalidJob("must be 1 to 255 characters", field="idempotency_key")
        check_json(key, field="idempotency_key", max_bytes=1024, max_depth=1)
    return replace(request, max_attempts=max_attempts)


def validate_jobs(requests: Sequence[JobRequest]) -> list[JobRequest]:
    """The requests with their defaults resolved, or JobsRejected naming every job that breaks a rule.

    Reads nothing from the database, so it costs nothing to call before a
    write (``enqueue_jobs`` calls it first).
    """
    validated: list[JobRequest] = []
    errors: list[QueueError] = []
    first_use: dict[str, int] = {}
    for index, request in enumerate(requests):
        try:
            validated.append(_validated(request))
        except QueueError as exc:
            exc.index = index
            errors.append(exc)
            continue
        key = request.idempotency_key
        if key is not None and key in first_use:
            message = f"same key as job {first_use[key]} of this request"
            errors.append(InvalidJob(message, field="idempotency_key", index=index))
        elif key is not None:
            first_use[key] = index
    if errors:
        raise JobsRejected(errors, total=len(requests))
    return validated


def _new_job(request: JobRequest, owner, now: datetime) -> Job:
    scheduled = request.run_at is not None and request.run_at > now
    return Job(
        type=request.type,
        payload=request.payload,
        priority=request.priority,
        queue=request.queue,
        max_attempts=request.max_attempts,
        next_retry_at=request.run_at if scheduled else None,
        enqueued_at=request.run_at if scheduled else now,
        idempotency_key=request.idempotency_key,
        idempotency_fingerprint=request.fingerprint() if request.idempotency_key else "",
        owner=owner,
        backend=request.backend,
    )


def _existing_for_key(request: JobRequest, owner) -> Job:
    """The job a repeated idempotency key refers to, or a conflict."""
    job = Job.objects.get(idempotency_key=request.idempotency_key)
    if (job.owner_id or None) != (getattr(owner, "pk", None)):
        # Reveal nothing about another owner's job.
        raise IdempotencyKeyInUse("this idempotency key is already in use", field="idempotency_key")
    if job.idempotency_fingerprint != request.fingerprint():
        raise IdempotencyConflict(
            "this idempotency key was used with a different request", field="idempotency_key"
        )
    job.was_created = False
    return job


def enqueue_jobs(requests: Sequence[JobRequest], *, owner=None) -> list[Job]:
    """Create jobs with their log and outbox rows, all or nothing.

    Joins the caller's transaction when there is one: if it rolls back, no
    job, no outbox row, and nothing ever reaches Redis. Each returned job has
    ``was_created`` (False when an idempotency key matched an existing job).
    Raises JobsRejected listing every job at fault (a broken rule, or a key
    used with a different request or by another owner), with its index.
    """
    validated = validate_jobs(requests)
    key_errors: list[QueueError] = []
    with transaction.atomic():
        now = timezone.now()
        jobs: list[Job] = []
        fresh: list[Job] = []
        for index, request in enumerate(validated):
            # One microsecond apart keeps a bulk's request order inside each tier.
            job = _new_job(request, owner, now + timedelta(microseconds=index))
            if request.idempotency_key:
                # A concurrent insert of the same key blocks on the unique index
                # until the other transaction ends, then fails here: exactly one job.
                try:
                    with transaction.atomic():
                        job.save(force_insert=True)
                except IntegrityError:
                    try:
                        jobs.append(_existing_for_key(request, owner))
                    except (IdempotencyConflict, IdempotencyKeyInUse) as exc:
                        exc.index = index
                        key_errors.append(exc)
                    continue
            job.was_created = True
            jobs.append(job)
            fresh.append(job)
        if key_errors:
            # Raised inside the block: the jobs saved so far roll back with it.
            raise JobsRejected(key_errors, total=len(requests))
        unsaved = [job for job in fresh if not job.idempotency_key]
        if unsaved:
            Job.objects.bulk_create(unsaved)
        if fresh:
            JobLog.objects.bulk_create(
                JobLog(
                    job_id=job.id,
                    event=INITIAL_EVENT,
                    message=f"enqueued on {job.queue} ({job.priority})",
                    extra={"run_at": job.next_retry_at.isoformat()} if job.next_retry_at else {},
                )
                for job in fresh
            )
            OutboxMessage.objects.bulk_create(ready_intent(job) for job in fresh)
            notify_relay()
    if len(fresh) == 1:
        job = fresh[0]
        log.info("job_enqueued", job_id=str(job.id), type=job.type, queue=job.queue, priority=job.priority)
    elif fresh:
        log.info("jobs_enqueued", count=len(fresh))
    return jobs


def enqueue_job(
    type: str,
    payload: dict[str, Any] | None = None,
    *,
    priority: str = Priority.MEDIUM,
    queue: str = "default",
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    idempotency_key: str | None = None,
    owner=None,
    backend: str = "",
) -> Job:
    """Create one job (see ``enqueue_jobs``); a repeated idempotency key returns the existing job.

    Raises the job's own error (InvalidJob, UnknownJobType, ...) rather than JobsRejected.
    """
    request = JobRequest(
        type=type,
        payload={} if payload is None else payload,
        priority=priority,
        queue=queue,
        run_at=run_at,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        backend=backend,
    )
    try:
        return enqueue_jobs([request], owner=owner)[0]
    except JobsRejected as rejected:
        raise rejected.errors[0] from None

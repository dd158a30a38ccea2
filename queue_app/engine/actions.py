"""What users ask for: cancel, retry, re-enqueue (through the API, the admin or code)."""

from __future__ import annotations

from django.db import transaction

from queue_app.engine.outbox import notify_relay, ready_intent
from queue_app.engine.transitions import apply_transition
from queue_app.exceptions import (
    JobNotFound,
    TransitionNotAllowed,
)
from queue_app.ids import parse_job_id
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.observability.logs import get_logger
from queue_app.states import REENQUEUED, Status

log = get_logger("queue_app.services")


def _job_id(job_id):
    """The UUID ``job_id`` names; JobNotFound for a value that cannot name a job (the
    database would raise DataError or ValidationError on it)."""
    parsed = parse_job_id(job_id)
    if parsed is None:
        raise JobNotFound("no such job")
    return parsed


def _conflict(job_id, action: str) -> TransitionNotAllowed | JobNotFound:
    status = Job.objects.filter(id=job_id).values_list("status", flat=True).first()
    if status is None:
        return JobNotFound("no such job")
    return TransitionNotAllowed(f"cannot {action} a job that is {status}")


def cancel_job(job_id, *, reason: str = "cancelled by request") -> Job:
    """Cancel a job: a queued one at once (its id leaves Redis through the outbox); a
    running one is asked to (``cancelling``): its worker, told at once, stops the
    attempt and confirms, and only then is the job cancelled. Whatever the handler
    did meanwhile, its result is not written. Asking again changes nothing.
    Raises TransitionNotAllowed (409) for a finished job.
    """
    job_id = _job_id(job_id)
    with transaction.atomic():
        if (
            apply_transition("cancel", job_id, message=reason) is None
            and apply_transition("request_cancel", job_id, message=reason) is None
            and not Job.objects.filter(id=job_id, status=Status.CANCELLING).exists()
        ):
            raise _conflict(job_id, "cancel")
    log.info("job_cancelled", job_id=str(job_id))
    return Job.objects.get(id=job_id)


def retry_job(job_id, *, reason: str = "retried by request") -> Job:
    """Queue a failed or cancelled job again, with one more attempt allowed.

    Attempts are never reset (they fence stale workers); instead max_attempts
    rises to at least attempts + 1. A job still cancelling keeps the request and is
    queued when its worker confirms the cancel: never claimable while the old
    attempt runs. Raises TransitionNotAllowed otherwise.
    """
    job_id = _job_id(job_id)
    with transaction.atomic():
        if (
            apply_transition("retry", job_id, message=reason) is None
            and apply_transition("request_retry", job_id, message=reason) is None
        ):
            raise _conflict(job_id, "retry")
    log.info("job_retried", job_id=str(job_id))
    return Job.objects.get(id=job_id)


def reenqueue_job(job_id) -> Job:
    """Push a queued job's id to Redis again (e.g. after Redis lost it); not a transition."""
    job_id = _job_id(job_id)
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(id=job_id).first()
        if job is None:
            raise JobNotFound("no such job")
        if job.status != Status.QUEUED:
            raise TransitionNotAllowed(f"cannot re-enqueue a job that is {job.status}")
        JobLog.objects.create(job_id=job.id, event=REENQUEUED, message="pushed to Redis again")
        OutboxMessage.objects.bulk_create([ready_intent(job)])
        notify_relay()
    return job

"""What users ask for: cancel, retry, re-enqueue (through the API, the admin or code).

One job at a time (``cancel_job``, ``retry_job``) or a selection at once
(``cancel_jobs``, ``retry_jobs``): the same transitions of
``states.TRANSITION_TABLE``, a selection in set-based statements of at most
``ACTION_BATCH_SIZE`` jobs each.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction

from queue_app.engine.outbox import notify_relay, ready_intent
from queue_app.engine.transitions import apply_transition, apply_transition_to_jobs
from queue_app.exceptions import (
    JobNotFound,
    TransitionNotAllowed,
)
from queue_app.ids import parse_job_id
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.observability.logs import get_logger
from queue_app.states import REENQUEUED, Status

log = get_logger(__name__)

# Jobs per statement of cancel_jobs and retry_jobs: one UPDATE, one insert of log rows, one of
# outbox rows each, in a transaction of its own (it holds their row locks until it commits).
ACTION_BATCH_SIZE = 1_000

# The transitions a cancel applies: each moves the jobs in its own source statuses (a queued
# job is cancelled, a running one asked to cancel; a retry of a job still cancelling waits).
CANCEL_TRANSITIONS = ("cancel", "request_cancel")
RETRY_TRANSITIONS = ("retry", "request_retry")


@dataclass(frozen=True)
class ActionCounts:
    """What an action on a selection did: how many jobs it changed (the rest were in a status
    the action does not apply to, or are gone), and of those, how many a retry let run once
    more by raising their max_attempts (they had used every attempt)."""

    changed: int
    max_attempts_raised: int = 0


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

    Attempts are never reset (they number the attempts in the job's log); instead max_attempts
    rises to at least attempts + 1, and the log row records it before and after
    (``max_attempts_before``, ``max_attempts``). A job still cancelling keeps the request
    and is queued when its worker confirms the cancel: never claimable while the old
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


def cancel_jobs(job_ids: Iterable, *, reason: str = "cancelled by request") -> ActionCounts:
    """Cancel every job of ``job_ids`` that can be cancelled (as cancel_job does), set-based."""
    return _apply_to_selection(CANCEL_TRANSITIONS, job_ids, reason, "jobs_cancelled")


def retry_jobs(job_ids: Iterable, *, reason: str = "retried by request") -> ActionCounts:
    """Retry every job of ``job_ids`` that is failed or cancelled (as retry_job does), set-based."""
    return _apply_to_selection(RETRY_TRANSITIONS, job_ids, reason, "jobs_retried")


def _apply_to_selection(names: tuple[str, ...], job_ids: Iterable, reason: str, event: str) -> ActionCounts:
    # Values that cannot name a job name none: they are left out, as ids of no job are.
    ids = list(dict.fromkeys(parsed for parsed in map(parse_job_id, job_ids) if parsed is not None))
    changed, raised = 0, 0
    for start in range(0, len(ids), ACTION_BATCH_SIZE):
        batch = ids[start : start + ACTION_BATCH_SIZE]
        with transaction.atomic():
            for name in names:
                jobs = apply_transition_to_jobs(name, batch, message=reason)
                changed += len(jobs)
                raised += sum(1 for job in jobs if raised_max_attempts(job.log_extra))
    log.info(event, jobs=changed, selected=len(ids), max_attempts_raised=raised)
    return ActionCounts(changed=changed, max_attempts_raised=raised)


def raised_max_attempts(log_extra: dict) -> bool:
    """Whether a retry's log extra says it raised max_attempts (the job had used every attempt)."""
    return log_extra.get("max_attempts", 0) > log_extra.get(
        "max_attempts_before", log_extra.get("max_attempts", 0)
    )


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

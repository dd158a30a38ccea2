"""Every change to a job's state, one function per transition.

Each transition is one conditional UPDATE (expected status, plus the attempt
number as a fencing token for a running job), its JobLog row and, where Redis
must change, its OutboxMessage row, in one transaction. Services never touch
Redis: the relay applies outbox rows. A transition whose condition no longer
holds changes nothing and is logged.
"""

from queue_app.exceptions import JobNotFound, TransitionNotAllowed
from queue_app.services.actions import cancel_job, reenqueue_job, retry_job
from queue_app.services.enqueue import MAX_ATTEMPTS_LIMIT, JobRequest, enqueue_job, enqueue_jobs
from queue_app.services.execution import (
    ClaimedJob,
    Completion,
    claim_jobs,
    complete_job,
    complete_jobs,
    extend_leases,
    fail_job,
    hand_back_job,
    note_fenced,
    rescue_expired_leases,
    retry_delay,
)
from queue_app.services.outbox import OUTBOX_CHANNEL

__all__ = [
    "MAX_ATTEMPTS_LIMIT",
    "OUTBOX_CHANNEL",
    "ClaimedJob",
    "Completion",
    "JobNotFound",
    "JobRequest",
    "TransitionNotAllowed",
    "cancel_job",
    "claim_jobs",
    "complete_job",
    "complete_jobs",
    "enqueue_job",
    "enqueue_jobs",
    "extend_leases",
    "fail_job",
    "hand_back_job",
    "note_fenced",
    "reenqueue_job",
    "rescue_expired_leases",
    "retry_delay",
    "retry_job",
]

"""The public Python API: what application code imports.

    from queue_app.services import enqueue_job, cancel_job, retry_job, job_handler
    from queue_app.services import cancel_jobs, retry_jobs  # a selection, set-based
    from queue_app.services import pause_queue, resume_queue, set_queue_limits
    from queue_app.services import chain, group, chord, enqueue_workflow, enqueue_batch
    from queue_app.services import current_job, Snooze  # inside a handler

Everything here joins the caller's transaction: a job enqueued inside
``transaction.atomic()`` exists (and will run) only if that block commits.
The engine's internals (claims, completions, leases) live in
``queue_app.engine`` and are not part of this API.
"""

from queue_app.engine.actions import (
    ActionCounts,
    cancel_job,
    cancel_jobs,
    reenqueue_job,
    retry_job,
    retry_jobs,
)
from queue_app.engine.batches import batch_counts, enqueue_batch
from queue_app.engine.controls import (
    QueueControls,
    pause_queue,
    queue_controls,
    resume_queue,
    set_queue_limits,
)
from queue_app.engine.enqueue import enqueue_job, enqueue_jobs
from queue_app.engine.job_requests import (
    LATEST_RUN_AT,
    MAX_ATTEMPTS_LIMIT,
    JobRequest,
    check_run_at,
    validate_jobs,
)
from queue_app.engine.workflows import (
    cancel_workflow,
    chain,
    chord,
    enqueue_workflow,
    group,
    retry_workflow,
)
from queue_app.exceptions import (
    IdempotencyConflict,
    InvalidJob,
    InvalidQueueControl,
    InvalidWorkflow,
    JobNotFound,
    JobsRejected,
    PayloadTooLarge,
    QueueError,
    Snooze,
    TransitionNotAllowed,
    UnknownJobType,
    UnknownQueue,
    WorkflowNotFound,
)
from queue_app.handlers import current_job, job_handler
from queue_app.schedules import periodic

__all__ = [
    "ActionCounts",
    "LATEST_RUN_AT",
    "MAX_ATTEMPTS_LIMIT",
    "IdempotencyConflict",
    "InvalidJob",
    "InvalidQueueControl",
    "InvalidWorkflow",
    "JobNotFound",
    "JobRequest",
    "JobsRejected",
    "PayloadTooLarge",
    "QueueControls",
    "QueueError",
    "Snooze",
    "TransitionNotAllowed",
    "UnknownJobType",
    "UnknownQueue",
    "WorkflowNotFound",
    "batch_counts",
    "cancel_job",
    "cancel_jobs",
    "cancel_workflow",
    "chain",
    "chord",
    "check_run_at",
    "current_job",
    "enqueue_job",
    "enqueue_batch",
    "enqueue_jobs",
    "enqueue_workflow",
    "group",
    "job_handler",
    "pause_queue",
    "periodic",
    "queue_controls",
    "reenqueue_job",
    "resume_queue",
    "retry_job",
    "retry_jobs",
    "retry_workflow",
    "set_queue_limits",
    "validate_jobs",
]

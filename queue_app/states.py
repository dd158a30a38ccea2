"""Job statuses and the transitions between them, as data.

Every service that changes a job's status names its transition here; the
chaos run checks each job's log trail against ``TRANSITIONS``.
"""

from django.db import models


class Status(models.TextChoices):
    QUEUED = "queued"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Priority(models.TextChoices):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


# The internal job type that runs django.tasks ``@task`` functions (queue_app.tasks_backend).
TASK_JOB_TYPE = "django.task"

# Lower tier pops first.
PRIORITY_TIER = {Priority.HIGH: 0, Priority.MEDIUM: 1, Priority.LOW: 2}

TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})

# event name -> (allowed source statuses, target status)
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "claimed": (frozenset({Status.QUEUED}), Status.PROCESSING),
    "completed": (frozenset({Status.PROCESSING}), Status.COMPLETED),
    "retry_scheduled": (frozenset({Status.PROCESSING}), Status.QUEUED),
    "failed": (frozenset({Status.PROCESSING}), Status.FAILED),
    "handed_back": (frozenset({Status.PROCESSING}), Status.QUEUED),
    "lease_expired_requeued": (frozenset({Status.PROCESSING}), Status.QUEUED),
    "lease_expired_failed": (frozenset({Status.PROCESSING}), Status.FAILED),
    "cancelled": (frozenset({Status.QUEUED, Status.PROCESSING}), Status.CANCELLED),
    "retried": (frozenset({Status.FAILED, Status.CANCELLED}), Status.QUEUED),
}
# The first log row of every job.
INITIAL_EVENT = "enqueued"

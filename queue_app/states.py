"""Job statuses, the transitions between them and the log events, as data.

``TRANSITION_TABLE`` is what the engine consults: ``engine.transitions``
applies a transition by name (its statement in ``engine/sql/transitions.sql``
has the same name), and the set-based statements (the batched claim and
completion, the lease rescue) bind their statuses and events from it. The
chaos run and the dashboard read the same table through ``TRANSITIONS``.
"""

from dataclasses import dataclass

from django.db import models


class Status(models.TextChoices):
    # A workflow step or a job enqueued with depends_on: not in Redis, not claimable, until the
    # transaction that settles its last dependency releases it (queued) or cancels it.
    WAITING = "waiting"
    QUEUED = "queued"
    PROCESSING = "processing"
    # Asked to cancel while running: the job stays here until its worker has stopped
    # the attempt and confirmed (then cancelled). It still holds its lease and its slot.
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Not started by its expires_at: it never runs.
    EXPIRED = "expired"


class Priority(models.TextChoices):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


# The internal job type that runs django.tasks ``@task`` functions (queue_app.tasks_backend).
TASK_JOB_TYPE = "django.task"

# A job's priority is an integer from PRIORITY_MIN to PRIORITY_MAX (django.tasks'
# range); higher runs sooner. The REST API's named tiers stand for fixed values.
PRIORITY_MIN, PRIORITY_MAX = -100, 100
PRIORITY_VALUE = {Priority.HIGH: 10, Priority.MEDIUM: 0, Priority.LOW: -10}


def priority_tier(value: int) -> str:
    """The named tier an integer priority is listed and filtered under (its sign)."""
    if value > 0:
        return Priority.HIGH
    return Priority.MEDIUM if value == 0 else Priority.LOW


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.EXPIRED})
# A worker runs an attempt of the job: it holds a lease, renewed by its heartbeat.
RUNNING = frozenset({Status.PROCESSING, Status.CANCELLING})

# The statuses in which a job holds its unique key unless its request names others: every
# status of a job yet to finish (queued, processing, and any later one that is not terminal,
# such as a running job whose cancel the worker has yet to confirm): a second job with the
# key must not start beside it. Not 'waiting' (a job with dependencies, which has not been
# released to run): the resolved defaults are part of an idempotency key's fingerprint, and
# keys stored before workflows existed must still match their repeats; a request that wants a
# waiting job to hold its key names the statuses.
DEFAULT_UNIQUE_STATES = frozenset(Status) - TERMINAL - {Status.WAITING}


@dataclass(frozen=True)
class Transition:
    """One allowed status change and what it writes besides the job row."""

    name: str
    sources: frozenset[str]
    target: str
    # The JobLog row written with it (event and level).
    event: str
    level: str
    # The outbox action when Redis must change ("enqueue", "schedule", "remove"), else None.
    outbox: str | None
    # A running job's transition: fenced by the claim's token (queue_app_jobs.fence, raised by each claim),
    # so the worker of an earlier claim changes nothing; its log row records the attempt.
    fenced: bool
    # Its enqueue puts a strict-FIFO job at the head of the list: the job was taken from
    # there and never started, so it stays ahead of the jobs enqueued after it.
    to_head: bool = False


_RUNNING = frozenset({Status.PROCESSING})

TRANSITION_TABLE: dict[str, Transition] = {
    t.name: t
    for t in (
        Transition("claim", frozenset({Status.QUEUED}), Status.PROCESSING, "claimed", "info", None, False),
        Transition("complete", _RUNNING, Status.COMPLETED, "completed", "info", None, True),
        Transition("schedule_retry", _RUNNING, Status.QUEUED, "retry_scheduled", "warning", "schedule", True),
        Transition("fail", _RUNNING, Status.FAILED, "failed", "error", None, True),
        Transition(
            "hand_back", _RUNNING, Status.QUEUED, "handed_back", "info", "enqueue", True, to_head=True
        ),
        # The handler raised Snooze: back to wait, the attempt taken back (as a hand-back's),
        # while the job has snoozed fewer than JOBQUEUE['MAX_SNOOZES'] times.
        Transition("snooze", _RUNNING, Status.QUEUED, "snoozed", "info", "schedule", True),
        Transition(
            "rescue_requeue", _RUNNING, Status.QUEUED, "lease_expired_requeued", "warning", "schedule", True
        ),
        Transition("rescue_fail", _RUNNING, Status.FAILED, "lease_expired_failed", "error", None, True),
        Transition(
            "cancel",
            frozenset({Status.QUEUED, Status.WAITING}),
            Status.CANCELLED,
            "cancelled",
            "info",
            "remove",
            False,
        ),
        # Workflows (engine/workflows.py): the settle of a job's last dependency releases it, in
        # the same transaction (queue_settle_dependents_v2, engine/sql/schema/workflows_v2.sql,
        # which writes these log rows and the release's outbox row itself) ...
        Transition(
            "release", frozenset({Status.WAITING}), Status.QUEUED, "released", "info", "enqueue", False
        ),
        # ... or cancels it: a dependency failed or was cancelled and its policy is "cancel".
        Transition(
            "dependency_failed",
            frozenset({Status.WAITING}),
            Status.CANCELLED,
            "dependency_failed",
            "warning",
            None,
            False,
        ),
        # A retried dependency (or a retried workflow) takes the steps its failure cancelled
        # back to waiting.
        Transition(
            "resume",
            frozenset({Status.FAILED, Status.CANCELLED}),
            Status.WAITING,
            "resumed",
            "info",
            None,
            False,
        ),
        # Past its expires_at before any worker started it: settled by the claim that pops it
        # (no outbox row: the popped id is acknowledged) or by the maintenance leader.
        Transition(
            "expire", frozenset({Status.QUEUED}), Status.EXPIRED, "expired", "warning", "remove", False
        ),
        # A running job is not cancelled under its worker: the worker is told (NOTIFY in the
        # same statement), stops the attempt, and confirms.
        Transition("request_cancel", _RUNNING, Status.CANCELLING, "cancel_requested", "info", None, False),
        Transition(
            "confirm_cancel",
            frozenset({Status.CANCELLING}),
            Status.CANCELLED,
            "cancel_confirmed",
            "info",
            None,
            True,
        ),
        # The worker died (its lease expired) while asked to cancel: nothing runs any more.
        Transition(
            "rescue_cancel",
            frozenset({Status.CANCELLING}),
            Status.CANCELLED,
            "lease_expired_cancelled",
            "warning",
            None,
            True,
        ),
        Transition(
            "retry",
            frozenset({Status.FAILED, Status.CANCELLED}),
            Status.QUEUED,
            "retried",
            "info",
            "enqueue",
            False,
        ),
        # A retry asked for while the cancel is not confirmed yet: it waits for the
        # confirmation (then "retry" runs in the same transaction), never before.
        Transition(
            "request_retry",
            frozenset({Status.CANCELLING}),
            Status.CANCELLING,
            "retry_requested",
            "info",
            None,
            False,
        ),
    )
}

# What a log trail walks: event -> (allowed source statuses, target status).
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    t.event: (t.sources, t.target) for t in TRANSITION_TABLE.values()
}

# The first log row of every job: it starts queued, or waiting when its extra says
# ``"waiting": true`` (a job with dependencies; see ``initial_status``).
INITIAL_EVENT = "enqueued"


def initial_status(extra: dict | None) -> str:
    """The status a job's first log row (``INITIAL_EVENT``) put it in."""
    return Status.WAITING if (extra or {}).get("waiting") else Status.QUEUED


# Log events that record a decision, not a transition; allowed anywhere after the first row.
COMPLETION_FENCED = "completion_fenced"  # a completion arrived after the attempt lost the job
FAILURE_FENCED = "failure_fenced"  # likewise for a failure
HEARTBEAT_FENCED = "heartbeat_fenced"  # a heartbeat for a lease the attempt no longer holds
REENQUEUED = "reenqueued"  # a queued job's id pushed to Redis again
SNOOZE_FENCED = "snooze_fenced"  # likewise for a snooze
JOB_LOG = "job_log"  # a line the running job logged (current_job().log)
JOB_LOG_DROPPED = "job_log_dropped"  # how many lines past JOB_LOG_LINES_PER_SECOND were dropped
NON_TRANSITION_EVENTS = frozenset(
    {COMPLETION_FENCED, FAILURE_FENCED, HEARTBEAT_FENCED, REENQUEUED, SNOOZE_FENCED, JOB_LOG, JOB_LOG_DROPPED}
)

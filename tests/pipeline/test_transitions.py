"""Walks states.TRANSITION_TABLE: every transition, from every status, against real PostgreSQL.

From an allowed source the job reaches the table's target with one log row
carrying the table's event and level, and an outbox row exactly when the
table says Redis must change. From any other status nothing changes.
"""

import contextlib
from datetime import timedelta

import pytest
from django.utils import timezone

from queue_app import services
from queue_app.engine import execution, workflows
from queue_app.engine.execution import Completion
from queue_app.engine.transitions import settle_dependents
from queue_app.exceptions import QueueError
from queue_app.models import Job, JobDependency, JobLog, JobWait, OutboxMessage, Workflow, WorkflowStep
from queue_app.states import RUNNING, TRANSITION_TABLE, TRANSITIONS, Status
from tests.helpers import claim_jobs

pytestmark = pytest.mark.django_db

WORKER = "walker"


def _complete(job):
    execution.complete_jobs([Completion(str(job.id), job.fence, {"ok": True})])


def _expire(job):
    Job.objects.filter(id=job.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    execution.expire_queued_jobs()


def _with_parent(job, parent_status: str) -> Job:
    """Make ``job`` depend on a new job in ``parent_status``; returns that parent."""
    parent = Job.objects.create(type="demo.echo", status=parent_status, max_attempts=1)
    JobWait.objects.create(job=job)
    JobDependency.objects.create(job=job, depends_on=parent)
    return parent


def _settle_parent(job, parent_status: str) -> None:
    settle_dependents([_with_parent(job, parent_status).id])


def _retry_workflow(job) -> None:
    _with_parent(job, Status.QUEUED)
    workflow = Workflow.objects.create()
    WorkflowStep.objects.create(job=job, workflow=workflow, name="step")
    workflows.retry_workflow(workflow)


# How each transition is reached through the engine's own entry points.
APPLY = {
    "claim": lambda job: claim_jobs([str(job.id)], worker_id=WORKER),
    "complete": _complete,
    "schedule_retry": lambda job: execution.fail_job(str(job.id), job.fence, "boom"),
    "fail": lambda job: execution.fail_job(str(job.id), job.fence, "boom", retry=False),
    "hand_back": lambda job: execution.hand_back_job(
        str(job.id), job.fence, worker_id=WORKER, reason="shutdown"
    ),
    "snooze": lambda job: execution.snooze_job(str(job.id), job.fence, 30),
    "rescue_requeue": lambda job: execution.rescue_expired_leases(),
    "rescue_fail": lambda job: execution.rescue_expired_leases(),
    "cancel": lambda job: services.cancel_job(job.id),
    "request_cancel": lambda job: services.cancel_job(job.id),
    "confirm_cancel": lambda job: execution.confirm_cancel(str(job.id), job.fence),
    "rescue_cancel": lambda job: execution.rescue_expired_leases(),
    "retry": lambda job: services.retry_job(job.id),
    "request_retry": lambda job: services.retry_job(job.id),
    # The maintenance leader's (and reconciler's) way; a claim settles a popped one the same.
    "expire": lambda job: _expire(job),
    "release": lambda job: _settle_parent(job, Status.COMPLETED),
    "dependency_failed": lambda job: _settle_parent(job, Status.FAILED),
    "resume": _retry_workflow,
}

# An entry point that serves two transitions takes the other one from these statuses (an
# attempt that ends while its job is cancelling confirms the cancel, whatever its outcome).
OTHER_TRANSITION = {
    ("cancel", Status.PROCESSING): "request_cancel",
    ("request_cancel", Status.QUEUED): "cancel",
    ("request_cancel", Status.WAITING): "cancel",
    ("retry", Status.CANCELLING): "request_retry",
    ("request_retry", Status.FAILED): "retry",
    ("request_retry", Status.CANCELLED): "retry",
    ("complete", Status.CANCELLING): "confirm_cancel",
    ("schedule_retry", Status.CANCELLING): "confirm_cancel",
    ("fail", Status.CANCELLING): "confirm_cancel",
    ("hand_back", Status.CANCELLING): "confirm_cancel",
    ("snooze", Status.CANCELLING): "confirm_cancel",
    ("rescue_requeue", Status.CANCELLING): "rescue_cancel",
    ("rescue_fail", Status.CANCELLING): "rescue_cancel",
    ("rescue_cancel", Status.PROCESSING): "rescue_requeue",
}

# The rescue chooses between its two transitions by the attempts left.
MAX_ATTEMPTS = {"rescue_fail": 1}


def _seed(status: str, *, max_attempts: int) -> Job:
    """A job already in ``status`` at attempt 1 (claimed once: fence 1), its lease (if running)
    expired a minute ago."""
    return Job.objects.create(
        type="demo.echo",
        status=status,
        attempts=1,
        fence=1,
        max_attempts=max_attempts,
        worker_id=WORKER if status in RUNNING else "",
        lease_expires_at=timezone.now() - timedelta(minutes=1) if status in RUNNING else None,
    )


def test_every_transition_has_a_walk_and_a_unique_event():
    assert set(APPLY) == set(TRANSITION_TABLE)
    assert len(TRANSITIONS) == len(TRANSITION_TABLE)


@pytest.mark.parametrize(
    ("name", "source"),
    [(name, source) for name, row in TRANSITION_TABLE.items() for source in sorted(row.sources)],
)
def test_from_an_allowed_source_the_table_says_what_is_written(name, source):
    row = TRANSITION_TABLE[name]
    job = _seed(source, max_attempts=MAX_ATTEMPTS.get(name, 3))

    APPLY[name](job)

    job.refresh_from_db()
    assert job.status == row.target
    [log] = JobLog.objects.filter(job_id=job.id)
    assert (log.event, log.level) == (row.event, row.level)
    if row.fenced:
        assert log.extra["attempt"] == 1
    outbox = list(OutboxMessage.objects.filter(job_id=job.id).values_list("action", "queue"))
    assert outbox == ([(row.outbox, job.queue)] if row.outbox else [])


@pytest.mark.parametrize(
    ("name", "source"),
    [
        (name, status)
        for name, row in TRANSITION_TABLE.items()
        for status in Status.values
        if status not in row.sources
    ],
)
def test_from_any_other_status_nothing_changes(name, source):
    row = TRANSITION_TABLE[name]
    job = _seed(source, max_attempts=MAX_ATTEMPTS.get(name, 3))

    with contextlib.suppress(QueueError):
        APPLY[name](job)

    other = OTHER_TRANSITION.get((name, source))
    if other is not None:
        # The entry point took the transition meant for this status instead.
        assert Job.objects.get(id=job.id).status == TRANSITION_TABLE[other].target
        assert JobLog.objects.filter(job_id=job.id, event=TRANSITION_TABLE[other].event).exists()
        assert not JobLog.objects.filter(job_id=job.id, event=row.event).exists()
        return
    assert Job.objects.get(id=job.id).status == source
    assert not JobLog.objects.filter(job_id=job.id, event=row.event).exists()
    assert not OutboxMessage.objects.filter(job_id=job.id).exists()

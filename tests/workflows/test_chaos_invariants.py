"""The chaos run's workflow invariants (scripts/chaoslib/invariants.py) on real workflows:
they hold for steps the engine decided, and they catch a step whose release was left out."""

import sys
import uuid

import pytest
from django.db import connection

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.models import Job
from queue_app.services import JobRequest, chain, enqueue_batch, enqueue_workflow
from queue_app.states import Status
from queue_app.testing import run_jobs
from tests.helpers import PROJECT_ROOT
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

WORKFLOW_CHECKS = [
    "callbacks_run_iff_policy",
    "no_dependent_started_before_its_dependencies",
    "no_step_left_waiting",
]


@pytest.fixture
def invariants(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "scripts"))
    from chaoslib import invariants

    yield invariants
    sys.modules.pop("chaoslib.invariants", None)


def journal() -> list[dict]:
    """The probe's executions in the chaos journal's format (the wf.* handlers record them)."""
    return [
        {
            "execution": uuid.uuid4().hex,
            "job": str(run.job_id),
            "attempt": run.attempt,
            "fence": None,
            "pid": run.pid,
            "at": run.started_at.timestamp(),
            "ended_at": None,
            "outcome": None,
        }
        for run in Execution.objects.all()
    ]


def violations(invariants) -> dict[str, int]:
    invariants.load([], journal())
    results = invariants.run_sql_checks(cancel_race_seconds=1.0, names=WORKFLOW_CHECKS)
    return {result.name: result.violations for result in results}


def test_the_engines_decisions_hold_every_workflow_invariant_and_walk_from_waiting(invariants):
    enqueue_workflow(chain(*(JobRequest("wf.add", {"value": n}) for n in range(4))))
    names = ("on_complete", "on_success", "on_failure")
    callbacks = {name: JobRequest("wf.collect", {"which": name}) for name in names}
    batch = enqueue_batch([JobRequest("wf.add"), JobRequest("wf.fail")], **callbacks)
    run_jobs()
    assert Job.objects.get(id=batch.on_success_id).status == Status.CANCELLED
    assert Job.objects.get(id=batch.on_failure_id).status == Status.COMPLETED
    assert violations(invariants) == dict.fromkeys(WORKFLOW_CHECKS, 0)
    # Steps start waiting: a walk from queued would reject their 'released' rows.
    assert invariants.check_log_trails().violations == 0


def test_a_dependent_left_waiting_after_its_dependency_completed_breaks_them(invariants):
    workflow = enqueue_workflow(chain(JobRequest("wf.add"), JobRequest("wf.add")))
    first, second = workflow.jobs.values()
    # A completion that does not settle its dependents (the broken build the run must catch).
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_app_jobs SET status = 'completed' WHERE id = %s", [first.id])
    run_jobs()
    assert Job.objects.get(id=second.id).status == Status.WAITING
    found = violations(invariants)
    assert found["no_step_left_waiting"] == 1
    assert found["callbacks_run_iff_policy"] == 1


def test_the_walk_starts_where_the_first_row_says(invariants):
    trail = ["enqueued", "released", "claimed", "completed"]
    assert invariants._walk(trail, Status.COMPLETED, Status.WAITING) is None
    assert "'released' from queued" in invariants._walk(trail, Status.COMPLETED)

"""Fan-in under concurrency, with real processes against PostgreSQL: the last two dependencies
of a job complete at the same moment, in two processes whose transactions overlap, and the
dependent is released exactly once (one 'released' log row, one outbox row)."""

import subprocess
import sys
import time

import psycopg
import pytest
from django.db import transaction

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.engine import execution
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.services import JobRequest, chord, enqueue_workflow
from queue_app.states import Status
from tests.helpers import PROJECT_ROOT, child_env, claim_jobs, database_url

pytestmark = pytest.mark.django_db(transaction=True)


def _complete_in_children(jobs_and_fences, *, start: float, holds) -> list[str]:
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.workflows.complete_in_child",
                job_id,
                str(fence),
                str(start),
                str(hold),
            ],
            cwd=PROJECT_ROOT,
            env=child_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        for (job_id, fence), hold in zip(jobs_and_fences, holds, strict=True)
    ]
    outputs = []
    for child in children:
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
        outputs.append(out.strip())
    return outputs


def _fan_in():
    workflow = enqueue_workflow(
        chord(
            [JobRequest("wf.add", {"value": 1}), JobRequest("wf.add", {"value": 2})], JobRequest("wf.collect")
        )
    )
    first, second, callback = workflow.jobs.values()
    claimed = claim_jobs([str(first.id), str(second.id)], worker_id="parent")
    return [(job.id, job.fence) for job in claimed], callback


def _released_once(callback) -> None:
    callback = Job.objects.get(id=callback.id)
    assert callback.status == Status.QUEUED
    assert JobLog.objects.filter(job_id=callback.id, event="released").count() == 1
    assert OutboxMessage.objects.filter(job_id=callback.id, action="enqueue").count() == 1


@pytest.mark.parametrize("round", range(3))
def test_the_last_two_dependencies_completing_at_once_in_two_processes_release_the_callback_once(round):
    """Both completions are written and uncommitted at the same time (each holds its transaction
    0.5 s): each settle, on its own snapshot, would see the other dependency still running. The
    lock on the waiting callback orders them: the second decides after the first's commit."""
    attempts, callback = _fan_in()
    start = time.time() + 1.5  # both children are up and connected by then
    assert _complete_in_children(attempts, start=start, holds=[0.5, 0.5]) == ["completed", "completed"]
    _released_once(callback)


def test_a_completion_that_commits_while_the_other_waits_on_the_lock_still_releases():
    """The first completion holds its transaction (and the callback's row lock) for 1.5 s; the
    second completes meanwhile, waits for the lock, and must see the first's commit."""
    attempts, callback = _fan_in()
    start = time.time() + 1.5
    assert _complete_in_children(attempts, start=start, holds=[1.5, 0.0]) == ["completed", "completed"]
    _released_once(callback)


def test_the_release_commits_with_the_completion_and_rolls_back_with_it():
    """The release is part of the completion's transaction: inside it the callback is already
    queued with its outbox row, another connection sees neither change before the commit, and a
    rollback undoes both. Fails when the release is taken out of the completion (left to a poll,
    an on_commit hook, or nothing)."""
    parent = JobRequest("wf.add", {"value": 1})
    workflow = enqueue_workflow({"parent": parent, "child": JobRequest("wf.add", depends_on=["parent"])})
    parent_job, child_job = workflow.jobs["parent"], workflow.jobs["child"]
    (claimed,) = claim_jobs([str(parent_job.id)], worker_id="w")

    def seen_by_another_connection() -> tuple[str, str]:
        with psycopg.connect(database_url(), autocommit=True) as other:
            rows = dict(
                other.execute(
                    "SELECT id::text, status FROM queue_app_jobs WHERE id = ANY(%s::uuid[])",
                    [[str(parent_job.id), str(child_job.id)]],
                ).fetchall()
            )
        return rows[str(parent_job.id)], rows[str(child_job.id)]

    with pytest.raises(RuntimeError), transaction.atomic():
        assert execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, 1)])
        assert Job.objects.get(id=child_job.id).status == Status.QUEUED
        assert OutboxMessage.objects.filter(job_id=child_job.id, action="enqueue").count() == 1
        assert seen_by_another_connection() == (Status.PROCESSING, Status.WAITING)
        raise RuntimeError("roll the completion back")
    assert seen_by_another_connection() == (Status.PROCESSING, Status.WAITING)
    assert not OutboxMessage.objects.filter(job_id=child_job.id).exists()

    assert execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, 1)])
    assert seen_by_another_connection() == (Status.COMPLETED, Status.QUEUED)
    assert list(
        JobLog.objects.filter(job_id=child_job.id).values_list("event", flat=True).order_by("id")
    ) == [
        "enqueued",
        "released",
    ]

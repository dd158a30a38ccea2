"""Batches: callbacks enqueued exactly once, by the settle of the last member, and counts
readable at any time. Sidekiq Pro's batches (``on(:complete)``, ``on(:success)``) and GoodJob's
batches (``on_finish``, ``on_success``, ``on_discard``) are the reference semantics."""

import pytest

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.engine import execution
from queue_app.models import Batch, Job, JobLog
from queue_app.services import JobRequest, batch_counts, cancel_job, enqueue_batch
from queue_app.states import Status
from queue_app.testing import run_jobs
from tests.helpers import claim_jobs

pytestmark = pytest.mark.django_db


def callbacks():
    return {
        "on_complete": JobRequest("wf.collect", {"which": "complete"}),
        "on_success": JobRequest("wf.collect", {"which": "success"}),
        "on_failure": JobRequest("wf.collect", {"which": "failure"}),
    }


def status_of(job_id) -> str:
    return Job.objects.get(id=job_id).status


def released(job_id) -> int:
    return JobLog.objects.filter(job_id=job_id, event="released").count()


def test_every_member_completing_fires_on_complete_and_on_success_once():
    batch = enqueue_batch([JobRequest("wf.add", {"value": i}) for i in range(5)], name="five", **callbacks())
    assert batch_counts(batch)["waiting"] == 0
    assert batch_counts(batch)["queued"] == 5 and batch_counts(batch)["total"] == 5
    run_jobs()
    batch = Batch.objects.get(id=batch.id)
    counts = batch_counts(batch)
    assert (counts["total"], counts["completed"], counts["pending"]) == (5, 5, 0)
    assert status_of(batch.on_complete_id) == Status.COMPLETED
    assert status_of(batch.on_success_id) == Status.COMPLETED
    assert status_of(batch.on_failure_id) == Status.CANCELLED
    assert released(batch.on_complete_id) == released(batch.on_success_id) == 1
    assert released(batch.on_failure_id) == 0
    # The callbacks are not members: they are not counted.
    assert Job.objects.get(id=batch.on_complete_id).result["results"] == [0, 1, 2, 3, 4]


def test_a_failed_member_fires_on_complete_and_on_failure_once_and_never_on_success():
    members = [JobRequest("wf.add", {"value": 1}), JobRequest("wf.fail"), JobRequest("wf.add", {"value": 2})]
    batch = enqueue_batch(members, **callbacks())
    run_jobs()
    batch = Batch.objects.get(id=batch.id)
    counts = batch_counts(batch)
    assert (counts["completed"], counts["failed"], counts["cancelled"], counts["pending"]) == (2, 1, 0, 0)
    assert status_of(batch.on_complete_id) == Status.COMPLETED
    assert status_of(batch.on_failure_id) == Status.COMPLETED
    assert status_of(batch.on_success_id) == Status.CANCELLED
    assert released(batch.on_complete_id) == released(batch.on_failure_id) == 1


def test_callbacks_wait_for_the_last_member_and_counts_follow():
    batch = enqueue_batch([JobRequest("wf.add"), JobRequest("wf.add")], on_complete=JobRequest("wf.collect"))
    first, second = batch.jobs
    (claimed,) = claim_jobs([str(first.id)], worker_id="w")
    execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, 1)])
    counts = batch_counts(batch)
    assert (counts["completed"], counts["queued"], counts["pending"]) == (1, 1, 1)
    assert status_of(batch.on_complete_id) == Status.WAITING
    cancel_job(second.id)
    assert batch_counts(batch)["cancelled"] == 1
    assert status_of(batch.on_complete_id) == Status.QUEUED
    assert released(batch.on_complete_id) == 1


def test_an_empty_batch_runs_on_complete_and_on_success_at_once_and_has_no_failure_callback():
    batch = enqueue_batch([], **callbacks())
    assert batch.on_failure_id is None
    assert status_of(batch.on_complete_id) == Status.QUEUED
    assert batch_counts(batch)["total"] == 0

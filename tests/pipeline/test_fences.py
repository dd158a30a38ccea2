"""Fencing: once a lease has expired and the job was rescued and claimed again,
nothing the old attempt writes gets through.

The claim's ``fence`` is the fencing token (DESIGN.md, "Job states"; a counter that,
unlike ``attempts``, a hand-back never lowers). Each write
of a stale attempt must change nothing, leave the new attempt in charge, and
leave a ``*_fenced`` row in the job's trail.
"""

import pytest
from django.db.models.functions import Now

from queue_app.engine import execution
from queue_app.engine.execution import Completion
from queue_app.models import Job, JobLog
from queue_app.runtime.reconciler import Reconciler
from queue_app.services import enqueue_job
from tests.helpers import claim_jobs, relay_all, wait_until

# Transactional: lease expiry compares with now(), which is frozen inside one transaction.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

WORKER = "worker-a"


def reconciler_rescue() -> None:
    Reconciler().run_once()


@pytest.fixture(params=[execution.rescue_expired_leases, reconciler_rescue], ids=["rescue", "reconciler"])
def rescued_and_reclaimed(request, queue_config):
    """A job whose attempt 1 lost its lease, was rescued, and is now held by attempt 2.

    Both claims are made under the same worker id, so only the fence can tell
    the two attempts apart.
    """
    queue_config(LEASE_SECONDS=1, HEARTBEAT_SECONDS=0.5, RETRY_BACKOFF_BASE_SECONDS=0.01)
    job = enqueue_job("demo.echo", {"n": 1})
    relay_all()
    [old] = claim_jobs([str(job.id)], worker_id=WORKER)
    wait_until(
        lambda: Job.objects.filter(id=job.id, lease_expires_at__lt=Now()).exists(),
        message="the first attempt's lease to expire",
    )
    request.param()
    assert Job.objects.get(id=job.id).status == "queued"
    [new] = wait_until(
        lambda: claim_jobs([str(job.id)], worker_id=WORKER),
        message="the retry to become due and be claimed",
    )
    assert (old.attempt, new.attempt) == (1, 2)
    return old, new


def fenced_rows(job_id, event: str) -> list[dict]:
    return list(JobLog.objects.filter(job_id=job_id, event=event).values_list("extra", flat=True))


def assert_held_by_attempt_2(job_id) -> Job:
    job = Job.objects.get(id=job_id)
    assert (job.status, job.attempts, job.worker_id) == ("processing", 2, WORKER)
    assert job.result is None and job.completed_at is None
    assert job.last_error == "lease expired: the worker stopped heartbeating"  # the rescue's, kept
    return job


def test_stale_completion_is_rejected(rescued_and_reclaimed):
    old, new = rescued_and_reclaimed
    assert execution.complete_jobs([Completion(old.id, old.fence, {"stale": True})]) == set()
    assert_held_by_attempt_2(old.id)
    assert fenced_rows(old.id, "completion_fenced") == [{"fence": 1}]
    assert not JobLog.objects.filter(job_id=old.id, event="completed").exists()
    # The current attempt still completes: the fence is per claim, not per job.
    assert execution.complete_jobs([Completion(new.id, new.fence, {"fresh": True})]) == {new.id}
    assert Job.objects.get(id=new.id).result == {"fresh": True}


def test_stale_failure_is_rejected(rescued_and_reclaimed):
    old, new = rescued_and_reclaimed
    assert execution.fail_job(old.id, old.fence, "stale error") is None
    assert execution.fail_job(old.id, old.fence, "stale error", retry=False) is None
    assert_held_by_attempt_2(old.id)
    assert fenced_rows(old.id, "failure_fenced") == [{"fence": 1}, {"fence": 1}]
    assert not JobLog.objects.filter(job_id=old.id, event__in=["retry_scheduled", "failed"]).exists()
    assert execution.fail_job(new.id, new.fence, "real error", retry=False) == "failed"


def test_stale_heartbeat_is_rejected(rescued_and_reclaimed):
    old, new = rescued_and_reclaimed
    lease_before = assert_held_by_attempt_2(old.id).lease_expires_at
    assert set(execution.extend_leases([(old.id, old.fence)], worker_id=WORKER)) == set()
    assert assert_held_by_attempt_2(old.id).lease_expires_at == lease_before
    # The heartbeat records it once it knows the attempt was not settled meanwhile.
    assert fenced_rows(old.id, "heartbeat_fenced") == []
    execution.note_leases_lost([(old.id, old.fence)])
    assert fenced_rows(old.id, "heartbeat_fenced") == [{"fence": 1}]
    # A heartbeat for the current attempt extends its lease.
    assert set(execution.extend_leases([(new.id, new.fence)], worker_id=WORKER)) == {new.id}
    assert Job.objects.get(id=new.id).lease_expires_at > lease_before

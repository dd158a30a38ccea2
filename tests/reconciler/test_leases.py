"""Expired leases: a job whose worker stopped heartbeating is requeued, or failed when out of attempts."""

import pytest
from django.db import connection

from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.runtime.reconciler import Reconciler
from queue_app.states import Status
from tests.helpers import claim_jobs
from tests.reconciler.support import enqueue, mark_relayed

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def running(*, max_attempts: int, lease_offset_ms: int) -> str:
    """A claimed job whose lease ends ``lease_offset_ms`` from the database's now()."""
    (job,) = enqueue(1, max_attempts=max_attempts)
    mark_relayed()
    (claimed,) = claim_jobs([str(job.id)], worker_id="dead-worker")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_jobs SET lease_expires_at = now() + make_interval(secs => %s) WHERE id = %s",
            [lease_offset_ms / 1000, claimed.id],
        )
    return claimed.id


def test_rows_just_either_side_of_the_lease_expiry():
    expired = running(max_attempts=3, lease_offset_ms=-1)
    expired_last_attempt = running(max_attempts=1, lease_offset_ms=-1)
    still_held = running(max_attempts=3, lease_offset_ms=+1000)
    still_held_last_attempt = running(max_attempts=1, lease_offset_ms=+1000)

    report = Reconciler().run_once()

    assert report.counts["requeued_expired"] == 1
    assert report.counts["failed_expired"] == 1
    requeued = Job.objects.get(id=expired)
    assert requeued.status == Status.QUEUED and requeued.attempts == 1 and requeued.next_retry_at
    assert requeued.worker_id == "" and requeued.lease_expires_at is None
    assert list(JobLog.objects.filter(job_id=expired).order_by("id").values_list("event", flat=True)) == [
        "enqueued",
        "claimed",
        "lease_expired_requeued",
    ]
    # Its way back to Redis is an outbox row: the relay's job, not restored here.
    assert OutboxMessage.objects.filter(job_id=expired, action="schedule", dispatched_at=None).count() == 1
    assert report.counts["skipped_relay_pending"] == 1
    failed = Job.objects.get(id=expired_last_attempt)
    assert failed.status == Status.FAILED and failed.completed_at is not None
    assert JobLog.objects.filter(job_id=expired_last_attempt, event="lease_expired_failed").count() == 1
    for job_id in (still_held, still_held_last_attempt):
        job = Job.objects.get(id=job_id)
        assert job.status == Status.PROCESSING and job.worker_id == "dead-worker"
        assert not JobLog.objects.filter(job_id=job_id, event__startswith="lease_expired").exists()


def test_many_expired_leases_are_rescued_in_batches():
    ids = [running(max_attempts=3, lease_offset_ms=-1000) for _ in range(7)]

    report = Reconciler(batch_size=3).run_once()

    assert report.counts["requeued_expired"] == 7
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {Status.QUEUED}

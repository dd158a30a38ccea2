"""The claim's not-yet-due check: an id popped before its job's ``next_retry_at`` is not
claimed (a retry set promoted early, a stale or duplicated push), and runs once it is due."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from structlog.testing import capture_logs

from queue_app import broker
from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job
from tests.helpers import claim_jobs, relay_all, run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def set_due(job, interval: str) -> None:
    """next_retry_at relative to the database clock, which the claim compares with."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_jobs SET next_retry_at = now() + %s::interval WHERE id = %s", [interval, job.id]
        )


def test_only_jobs_already_due_are_claimed():
    ready = enqueue_job("demo.echo")
    just_due, just_not_due, far = (enqueue_job("demo.echo") for _ in range(3))
    set_due(just_due, "-1 millisecond")
    set_due(just_not_due, "2 seconds")
    set_due(far, "1 hour")
    ids = [str(job.id) for job in (ready, just_due, just_not_due, far)]
    claimed = claim_jobs(ids, worker_id="w")
    assert {job.id for job in claimed} == {str(ready.id), str(just_due.id)}
    for job in (just_not_due, far):
        row = Job.objects.get(id=job.id)
        assert row.status == "queued" and row.attempts == 0 and row.worker_id == ""
        assert row.started_at is None and row.next_retry_at > timezone.now()
        assert not JobLog.objects.filter(job_id=job.id, event="claimed").exists()


def test_an_id_popped_early_goes_back_and_runs_once_when_due(redis_client):
    run_at = timezone.now() + timedelta(seconds=4)
    job = enqueue_job("demo.echo", {"n": 1}, run_at=run_at)
    relay_all()
    # As if promoted early: only in the ready set, not in the retry set.
    assert redis_client.zrem(broker.retry_key("default"), str(job.id)) == 1
    redis_client.zadd(broker.priority_key("default"), {str(job.id): 1})
    with capture_logs() as logs:
        run_worker()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    (claim,) = JobLog.objects.filter(job_id=job.id, event="claimed")
    assert claim.created_at >= run_at
    # The early pop reached the claim and was turned down while the job was still queued.
    refused = [e for e in logs if e["event"] == "job_status_not_queued" and e["job_id"] == str(job.id)]
    assert refused and refused[0]["status"] == "queued"

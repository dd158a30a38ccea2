"""A failed attempt keeps 'ExceptionType: message' apart from its traceback, and the trail stays short."""

from __future__ import annotations

import pytest
from django.db import connection

from queue_app.engine import execution
from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job
from queue_app.testing import run_jobs
from tests.helpers import claim_jobs, run_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def test_a_failure_stores_the_summary_and_the_traceback_apart():
    job = enqueue_job("probe.fail")  # raises RuntimeError("probe failure"), 3 attempts
    assert run_jobs(with_scheduled=True).failed == 1
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.last_error == "RuntimeError: probe failure"
    assert job.last_error_class == "builtins.RuntimeError"
    assert job.last_error_traceback.startswith("Traceback (most recent call last):")
    assert 'File "' in job.last_error_traceback
    assert job.last_error_traceback.rstrip().endswith("RuntimeError: probe failure")
    # The trail names the error once per attempt, never the traceback.
    messages = JobLog.objects.filter(job_id=job.id, event__in=["retry_scheduled", "failed"])
    assert [entry.message for entry in messages] == ["RuntimeError: probe failure"] * 3
    assert not JobLog.objects.filter(job_id=job.id, message__contains="Traceback").exists()


@pytest.mark.parametrize(
    ("job_type", "message"), [("probe.fail_io", "slot failure"), ("probe.fail_async", "coroutine failure")]
)
def test_a_slot_jobs_failure_keeps_its_traceback_from_the_owner(job_type, message):
    """Issue 30 item 10: the slot path wrote the whole traceback as the owner's summary. It
    now settles through the same executor as the main thread: the whole field compared."""
    job = enqueue_job(job_type)
    run_worker(slots=2)
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.last_error == f"ValueError: {message}"
    assert job.last_error_class == "builtins.ValueError"
    assert job.last_error_traceback.startswith("Traceback (most recent call last):")
    assert job.last_error_traceback.rstrip().endswith(f"ValueError: {message}")
    [entry] = JobLog.objects.filter(job_id=job.id, event="failed")
    assert entry.message == f"ValueError: {message}"


def test_a_later_success_clears_the_traceback():
    job = enqueue_job("demo.echo", {})
    (claimed,) = claim_jobs([str(job.id)], worker_id="split-test")
    execution.fail_job(claimed.id, claimed.fence, "ValueError: x", traceback="Traceback ...", retry=True)
    Job.objects.filter(id=job.id).update(next_retry_at=None)
    (claimed,) = claim_jobs([str(job.id)], worker_id="split-test")
    execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, {})])
    job.refresh_from_db()
    assert (job.status, job.last_error, job.last_error_traceback) == ("completed", "", "")


def test_migration_moves_old_tracebacks_out_of_last_error():
    from importlib import import_module

    split = import_module("queue_app.migrations.0005_job_last_error_traceback").SPLIT_OLD_TRACEBACKS
    old = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/jobs.py", line 3, in run\n'
        "    boom()\n"
        "KeyError: 'id'\n"
    )
    job = enqueue_job("demo.echo", {})
    plain = enqueue_job("demo.echo", {"n": 2})
    Job.objects.filter(id=job.id).update(last_error=old)
    Job.objects.filter(id=plain.id).update(last_error="lease expired: the worker stopped heartbeating")
    with connection.cursor() as cursor:
        # The migration ran before 0026 gave the table its present name.
        cursor.execute(split.replace("UPDATE jobs\n", "UPDATE queue_app_jobs\n", 1))
    job.refresh_from_db()
    plain.refresh_from_db()
    assert (job.last_error, job.last_error_traceback) == ("KeyError: 'id'", old)
    assert (plain.last_error, plain.last_error_traceback) == (
        "lease expired: the worker stopped heartbeating",
        "",
    )

"""Counters move where a state change commits, once per change, and never for a rolled-back one.

Counted in this process (no PROMETHEUS_MULTIPROC_DIR), as deltas: the
counters live as long as the process.
"""

from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from queue_app.engine import execution
from queue_app.engine.execution import Completion
from queue_app.models import Job
from queue_app.observability.metrics import MULTIPROC_ENV
from queue_app.runtime.reconciler import Reconciler
from queue_app.services import enqueue_job
from tests.helpers import claim_jobs, wait_until
from tests.observability.support import local_value

# Transactional: the counters move on commit (on_commit never fires inside a test's atomic block).
pytestmark = [pytest.mark.django_db(transaction=True)]

ECHO = {"type": "demo.echo", "queue": "default"}


@pytest.fixture(autouse=True)
def _own_process_counters(monkeypatch):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)


def test_enqueue_counts_on_commit_and_not_on_rollback():
    before = local_value("jobqueue_jobs_enqueued_total", **ECHO)
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_job("demo.echo", {"n": 1})
        raise RuntimeError("the caller's transaction rolls back")
    assert local_value("jobqueue_jobs_enqueued_total", **ECHO) == before
    with transaction.atomic():
        enqueue_job("demo.echo", {"n": 2})
        enqueue_job("demo.echo", {"n": 3})
        assert local_value("jobqueue_jobs_enqueued_total", **ECHO) == before  # not committed yet
    assert local_value("jobqueue_jobs_enqueued_total", **ECHO) == before + 2


def test_a_repeated_idempotency_key_is_not_counted_again():
    before = local_value("jobqueue_jobs_enqueued_total", **ECHO)
    enqueue_job("demo.echo", {"n": 1}, idempotency_key="metrics-once")
    enqueue_job("demo.echo", {"n": 1}, idempotency_key="metrics-once")
    assert local_value("jobqueue_jobs_enqueued_total", **ECHO) == before + 1


def test_claim_and_completion_count_and_observe_the_wait():
    started = local_value("jobqueue_jobs_started_total", **ECHO)
    waits = local_value("jobqueue_job_wait_seconds_count", **ECHO)
    completed = local_value("jobqueue_jobs_completed_total", **ECHO)
    job = enqueue_job("demo.echo", {"n": 1})
    (claimed,) = claim_jobs([str(job.id)], worker_id="metrics-test")
    # A duplicate id (Redis offered it twice) is not a second start.
    assert claim_jobs([str(job.id)], worker_id="metrics-test") == []
    assert local_value("jobqueue_jobs_started_total", **ECHO) == started + 1
    assert local_value("jobqueue_job_wait_seconds_count", **ECHO) == waits + 1
    execution.complete_jobs([Completion(claimed.id, claimed.attempt, {"ok": True})])
    assert local_value("jobqueue_jobs_completed_total", **ECHO) == completed + 1


def test_a_fenced_completion_counts_as_fenced_not_completed():
    completed = local_value("jobqueue_jobs_completed_total", **ECHO)
    fenced = local_value("jobqueue_jobs_fenced_total", kind="completion_fenced", **ECHO)
    job = enqueue_job("demo.echo", {"n": 1})
    (claimed,) = claim_jobs([str(job.id)], worker_id="metrics-test")
    # The attempt loses the job to a rescue (a cancel now waits for the attempt instead).
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    execution.rescue_expired_leases()
    assert execution.complete_jobs([Completion(claimed.id, claimed.attempt, {"ok": True})]) == set()
    assert local_value("jobqueue_jobs_completed_total", **ECHO) == completed
    assert local_value("jobqueue_jobs_fenced_total", kind="completion_fenced", **ECHO) == fenced + 1


def test_a_failed_attempt_counts_as_retried_then_failed():
    retried = local_value("jobqueue_jobs_retried_total", **ECHO)
    failed = local_value("jobqueue_jobs_failed_total", **ECHO)
    job = enqueue_job("demo.echo", {"n": 1}, max_attempts=2)
    (first,) = claim_jobs([str(job.id)], worker_id="metrics-test")
    assert execution.fail_job(first.id, first.attempt, "boom") == "queued"
    Job.objects.filter(id=job.id).update(next_retry_at=Now())
    (second,) = claim_jobs([str(job.id)], worker_id="metrics-test")
    assert execution.fail_job(second.id, second.attempt, "boom") == "failed"
    # The stale first attempt reporting late is fenced, not a third outcome.
    assert execution.fail_job(first.id, first.attempt, "late") is None
    assert local_value("jobqueue_jobs_retried_total", **ECHO) == retried + 1
    assert local_value("jobqueue_jobs_failed_total", **ECHO) == failed + 1
    assert local_value("jobqueue_jobs_fenced_total", kind="failure_fenced", **ECHO) >= 1


@pytest.mark.redis
def test_a_rescued_lease_counts_as_a_retry_and_as_a_reconciler_action(queue_config):
    queue_config(LEASE_SECONDS=1, HEARTBEAT_SECONDS=0.5)
    retried = local_value("jobqueue_jobs_retried_total", **ECHO)
    actions = local_value("jobqueue_reconciler_actions_total", action="requeued_expired")
    job = enqueue_job("demo.echo", {"n": 1})
    claim_jobs([str(job.id)], worker_id="metrics-test")
    wait_until(
        lambda: Job.objects.filter(id=job.id, lease_expires_at__lt=Now()).exists(),
        message="the lease to expire",
    )
    Reconciler(dry_run=True).run_once()  # a dry run changes nothing and counts nothing
    assert local_value("jobqueue_reconciler_actions_total", action="requeued_expired") == actions
    Reconciler().run_once()
    assert Job.objects.get(id=job.id).status == "queued"
    assert local_value("jobqueue_jobs_retried_total", **ECHO) == retried + 1
    assert local_value("jobqueue_reconciler_actions_total", action="requeued_expired") == actions + 1


def test_metrics_off_counts_nothing(queue_config):
    queue_config(METRICS_ENABLED="0")
    enqueued = local_value("jobqueue_jobs_enqueued_total", **ECHO)
    started = local_value("jobqueue_jobs_started_total", **ECHO)
    job = enqueue_job("demo.echo", {"n": 1})
    claim_jobs([str(job.id)], worker_id="metrics-test")
    assert local_value("jobqueue_jobs_enqueued_total", **ECHO) == enqueued
    assert local_value("jobqueue_jobs_started_total", **ECHO) == started

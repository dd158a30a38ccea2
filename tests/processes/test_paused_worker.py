"""A worker stopped (SIGSTOP) past its lease while holding a batch, then resumed."""

import os
import signal
import subprocess

import pytest
from django.db.models.functions import Now

from queue_app import services
from queue_app.engine import execution
from queue_app.models import Job, JobLog
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import child_env, kill_group, manage, relay_all, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


def test_resumed_worker_does_not_start_batch_jobs_whose_lease_it_lost(relay_path, queue_config):
    # Claim far ahead and never release, so the batch stays held behind the first job.
    worker = manage(
        "runworker",
        env=child_env(
            JOBQUEUE_LEASE_SECONDS="2",
            JOBQUEUE_HEARTBEAT_SECONDS="0.5",
            JOBQUEUE_WORKER_CLAIM_AHEAD_SECONDS="600",
            JOBQUEUE_WORKER_RELEASE_AFTER_SECONDS="600",
        ),
        stderr=subprocess.DEVNULL,
    )
    try:
        warm_up = enqueue_job("probe.run")  # a first job, so the worker claims batches
        relay_all()
        wait_until(lambda: Job.objects.filter(id=warm_up.id, status="completed").exists(), message="warm-up")
        # Long enough that the stop below lands while it runs, however loaded the machine.
        running = enqueue_job("probe.run", {"sleep": 4}, priority="high")
        waiting = enqueue_jobs([JobRequest(type="probe.run") for _ in range(2)])
        relay_all()  # one push of all three: the worker's next pop takes them as one batch
        wait_until(lambda: Execution.objects.filter(job_id=running.id).exists(), message="first job to start")
        assert Job.objects.filter(status="processing").count() == 3
        os.killpg(worker.pid, signal.SIGSTOP)
        wait_until(
            lambda: not Job.objects.filter(status="processing", lease_expires_at__gte=Now()).exists(),
            message="the leases to run out",
        )
        # The reconciler's rescue, then the waiting jobs end elsewhere before the worker wakes.
        # Its retry of the running job is not due before the test ends, so a second claim of
        # it could only come from the resumed worker's stale batch.
        queue_config(RETRY_BACKOFF_BASE_SECONDS=3600, RETRY_BACKOFF_MAX_SECONDS=3600)
        assert len(execution.rescue_expired_leases()) == 3
        for job in waiting:
            services.cancel_job(job.id)
        os.killpg(worker.pid, signal.SIGCONT)
        after = enqueue_job("probe.run")
        relay_all()
        wait_until(lambda: Job.objects.filter(id=after.id, status="completed").exists(), message="next job")
    finally:
        kill_group(worker)
    for job in waiting:
        assert not Execution.objects.filter(job_id=job.id).exists()
        assert Job.objects.get(id=job.id).status == "cancelled"
    assert JobLog.objects.filter(job_id=running.id, event="claimed").count() == 1

"""A worker stopped (SIGSTOP) past its lease while holding a batch, then resumed."""

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.db import transaction
from django.db.models.functions import Now

from queue_app import services
from queue_app.engine import execution
from queue_app.models import Job, JobLog
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import child_env, kill_group, manage, relay_all, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


def _short_lease_worker(**env: str) -> subprocess.Popen:
    """A runworker whose lease (2 s) runs out soon after it stops heartbeating."""
    env = child_env(JOBQUEUE_LEASE_SECONDS="2", JOBQUEUE_HEARTBEAT_SECONDS="0.5", **env)
    return manage("runworker", env=env, stderr=subprocess.DEVNULL)


def test_resumed_worker_does_not_start_batch_jobs_whose_lease_it_lost(relay_path, queue_config):
    # Claim far ahead and never release, so the batch stays held behind the first job.
    worker = _short_lease_worker(
        JOBQUEUE_WORKER_CLAIM_AHEAD_SECONDS="600", JOBQUEUE_WORKER_RELEASE_AFTER_SECONDS="600"
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


def _stopped_child(pid: int) -> int | None:
    """A child of ``pid`` (the supervisor's worker process) that is stopped, if one is."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(OSError):  # it exited meanwhile
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                return int(child)
    return None


def _shows_within(condition, seconds: float) -> bool:
    """Whether ``condition`` comes true within ``seconds`` (for what must not happen)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def test_worker_frozen_after_its_lease_check_does_not_start_the_job_it_lost(relay_path, queue_config):
    # The worker process freezes itself after it last confirmed the lease and before the
    # handler runs (as a SIGSTOP, or a store that hangs on the way, would leave it), for
    # longer than the lease, and its job is rescued. Woken, it must not run it, even with
    # its heartbeat not yet able to tell it so.
    worker = _short_lease_worker(JOBSITE_FAILPOINTS="worker.before_start=stop")
    try:
        lost = enqueue_job("probe.run")
        relay_all()
        frozen = wait_until(lambda: _stopped_child(worker.pid), message="the worker to stop before the start")
        leased = Job.objects.filter(id=lost.id, status="processing", lease_expires_at__gte=Now())
        wait_until(lambda: not leased.exists(), message="its lease to run out")
        # Its retry is not due before the test ends: a run of it could only be the stale one.
        queue_config(RETRY_BACKOFF_BASE_SECONDS=3600, RETRY_BACKOFF_MAX_SECONDS=3600)
        with transaction.atomic():
            # The rescue's transaction stays open while the worker wakes: its heartbeat's
            # extension waits on the row, so only the worker's own clock can stop the start.
            assert [str(job.id) for job in execution.rescue_expired_leases()] == [str(lost.id)]
            os.kill(frozen, signal.SIGCONT)
            ran = _shows_within(lambda: Execution.objects.filter(job_id=lost.id).exists(), seconds=2)
        assert not ran
        after = enqueue_job("probe.run")
        relay_all()
        wait_until(lambda: Job.objects.filter(id=after.id, status="completed").exists(), message="next job")
    finally:
        kill_group(worker)
    assert not Execution.objects.filter(job_id=lost.id).exists()
    assert Job.objects.get(id=lost.id).status == "queued"
    assert JobLog.objects.filter(job_id=lost.id, event="claimed").count() == 1

"""A strict-FIFO queue through a real worker: jobs run in enqueue order, whatever their priority."""

import subprocess

import pytest

from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job
from tests.helpers import child_env, kill_group, manage, relay_all
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


def test_a_fifo_queue_runs_jobs_in_enqueue_order_ignoring_priority(queue_config):
    queue_config(QUEUES="default,bulk:fifo")
    # Mixed tiers, so a priority order would differ from the enqueue order at once.
    priorities = ["low", "high", "medium"] * 20
    jobs = [enqueue_job("probe.run", {"n": n}, queue="bulk", priority=p) for n, p in enumerate(priorities)]
    # A job on the priority queue, which this worker does not serve.
    other = enqueue_job("probe.run", priority="high")
    relay_all()
    worker = manage(
        "runworker",
        "--queues=bulk",
        "--burst",
        # Batches of 7 spread the 60 jobs over several pops and claims.
        env=child_env(JOBQUEUE_QUEUES="default,bulk:fifo", JOBQUEUE_WORKER_BATCH_SIZE="7"),
        stderr=subprocess.DEVNULL,
    )
    assert worker.wait(timeout=120) == 0
    ran = list(Execution.objects.order_by("id").values_list("job_id", flat=True))
    assert ran == [job.id for job in jobs]
    assert Job.objects.filter(queue="bulk", status="completed").count() == 60
    assert Job.objects.get(id=other.id).status == "queued"


def test_a_batch_claimed_behind_a_slow_fifo_job_is_not_released_behind_later_jobs(queue_config):
    """The release of a batch behind a slow handler (WORKER_RELEASE_AFTER_SECONDS) hands jobs
    back through the outbox, which appends a FIFO id to the tail of its list: behind every
    job enqueued after it. In a strict-FIFO queue the batch's jobs stay with the worker."""
    queue_config(QUEUES="default,bulk:fifo")
    env = child_env(
        JOBQUEUE_QUEUES="default,bulk:fifo",
        JOBQUEUE_WORKER_BATCH_SIZE="7",
        JOBQUEUE_WORKER_CLAIM_AHEAD_SECONDS="600",
    )
    # The first claim takes one job (nothing has run yet); the next takes the slow one and
    # six behind it, held for a second: long past the release delay.
    sleeps = [0, 1.0] + [0] * 12
    jobs = [
        enqueue_job("probe.run", {"n": n, "sleep": sleep}, queue="bulk") for n, sleep in enumerate(sleeps)
    ]
    relay_all()
    # The relay runs, as in production: a handed-back job would reach the list again.
    relay = manage("runrelay", env=env, stderr=subprocess.DEVNULL)
    try:
        worker = manage("runworker", "--queues=bulk", "--burst", env=env, stderr=subprocess.DEVNULL)
        assert worker.wait(timeout=120) == 0
    finally:
        kill_group(relay)
    ran = list(Execution.objects.order_by("id").values_list("job_id", flat=True))
    assert ran == [job.id for job in jobs]
    assert not JobLog.objects.filter(job__queue="bulk", event="handed_back").exists()

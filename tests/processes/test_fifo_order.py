"""A strict-FIFO queue through a real worker: jobs run in enqueue order, whatever their priority."""

import signal
import subprocess

import pytest

from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job
from tests.helpers import child_env, kill_group, manage, relay_all, wait_until
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


def _run_in_order_of_enqueue(jobs) -> None:
    ran = list(Execution.objects.order_by("id").values_list("job_id", flat=True))
    assert ran == [job.id for job in jobs]


def _batch_behind_a_slow_job(queue_config, slow: float = 1.0, **settings: str):
    """14 FIFO jobs, the second sleeping ``slow`` seconds, and the settings of workers that
    claim up to 7 at once: the first claim takes one job (nothing has run yet), the next the
    slow one and six behind it. Returns (child environment, jobs), the jobs already in Redis."""
    queue_config(QUEUES="default,bulk:fifo")
    env = child_env(
        JOBQUEUE_QUEUES="default,bulk:fifo",
        JOBQUEUE_WORKER_BATCH_SIZE="7",
        JOBQUEUE_WORKER_CLAIM_AHEAD_SECONDS="600",
        **settings,
    )
    sleeps = [0, slow] + [0] * 12
    jobs = [
        enqueue_job("probe.run", {"n": n, "sleep": sleep}, queue="bulk") for n, sleep in enumerate(sleeps)
    ]
    relay_all()
    return env, jobs


def test_a_batch_claimed_behind_a_slow_fifo_job_is_not_released_behind_later_jobs(queue_config):
    """The release of a batch behind a slow handler (WORKER_RELEASE_AFTER_SECONDS) would hand
    its jobs back while this worker may pop the jobs behind them first (appended to the tail,
    as they once were, they ran last). In a strict-FIFO queue the batch stays with the worker."""
    # The slow job is held for a second: long past the release delay.
    env, jobs = _batch_behind_a_slow_job(queue_config)
    # The relay runs, as in production: a handed-back job would reach the list again.
    relay = manage("runrelay", env=env, stderr=subprocess.DEVNULL)
    try:
        worker = manage("runworker", "--queues=bulk", "--burst", env=env, stderr=subprocess.DEVNULL)
        assert worker.wait(timeout=120) == 0
    finally:
        kill_group(relay)
    _run_in_order_of_enqueue(jobs)
    assert not JobLog.objects.filter(job__queue="bulk", event="handed_back").exists()


def test_a_worker_stopped_mid_batch_leaves_its_fifo_jobs_first_in_line(queue_config):
    """SIGTERM (a deploy) while a batch's first job runs: the rest of the batch is handed
    back at the head of the list, and the next worker runs it before the later jobs."""
    # The stop must reach the worker while the slow job runs: seconds to spare on a loaded machine.
    env, jobs = _batch_behind_a_slow_job(queue_config, slow=4.0, JOBQUEUE_WORKER_RELEASE_AFTER_SECONDS="600")
    relay = manage("runrelay", env=env, stderr=subprocess.DEVNULL)
    try:
        first = manage("runworker", "--queues=bulk", env=env, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: Execution.objects.filter(job_id=jobs[1].id).exists(), timeout=60)
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=60) == 0
        finally:
            kill_group(first)
        handed_back = JobLog.objects.filter(job__queue="bulk", event="handed_back")
        assert set(handed_back.values_list("job_id", flat=True)) == {job.id for job in jobs[2:8]}
        second = manage("runworker", "--queues=bulk", "--burst", env=env, stderr=subprocess.DEVNULL)
        assert second.wait(timeout=120) == 0
    finally:
        kill_group(relay)
    _run_in_order_of_enqueue(jobs)

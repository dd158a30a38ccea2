"""A strict-FIFO queue through a real worker: jobs run in enqueue order, whatever their priority."""

import subprocess

import pytest

from queue_app.models import Job
from queue_app.services import enqueue_job
from tests.helpers import child_env, manage, relay_all
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

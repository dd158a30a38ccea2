"""runworker --max-jobs: each worker process is replaced after starting that many jobs, with
nothing lost, run twice or handed back on the way (like Celery's --max-tasks-per-child and
RQ's --max-jobs, except that the command keeps serving with a new process)."""

import subprocess
from collections import Counter

import pytest

from queue_app.models import Job, JobLog
from queue_app.services import JobRequest, enqueue_jobs
from tests.helpers import child_env, manage, relay_all
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


def _run(processes, *args: str, env: dict[str, str] | None = None) -> str:
    worker = manage(
        "runworker", "--burst", *args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    processes.append(worker)
    _, stderr = worker.communicate(timeout=180)
    assert worker.returncode == 0, stderr[-3000:]
    return stderr


@pytest.mark.parametrize(
    ("slots", "job_type", "sleep"), [("1", "probe.run", 0), ("4", "probe.io_wait", 0.05)]
)
def test_each_process_starts_at_most_max_jobs_and_every_job_runs_once(processes, slots, job_type, sleep):
    # Quick jobs would have a process claim a whole batch ahead, and four free slots four
    # jobs: past the third, the claim must stop at what the process will still start.
    jobs = enqueue_jobs([JobRequest(job_type, {"sleep": sleep}) for _ in range(8)])
    relay_all()

    stderr = _run(processes, "--max-jobs=3", f"--slots={slots}")

    ids = [job.id for job in jobs]
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {"completed"}
    assert set(Job.objects.filter(id__in=ids).values_list("attempts", flat=True)) == {1}
    runs = Counter(Execution.objects.filter(job_id__in=ids).values_list("job_id", flat=True))
    assert runs == dict.fromkeys(ids, 1)
    per_process = sorted(
        Counter(Execution.objects.filter(job_id__in=ids).values_list("pid", flat=True)).values()
    )
    assert per_process == [2, 3, 3]
    # Claimed only what it would start: nothing was handed back at a recycle.
    assert not JobLog.objects.filter(job_id__in=ids, event="handed_back").exists()
    assert stderr.count("worker_process_recycled") == 2


@pytest.mark.parametrize("option", ["--max-jobs=0", "--max-jobs=-1"])
def test_runworker_rejects_a_max_jobs_below_one_naming_it(option):
    process = manage(
        "runworker", "--burst", option, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1
    assert "CommandError: --max-jobs must be at least 1" in stderr and "Traceback" not in stderr


def test_a_recycle_lets_slot_jobs_longer_than_the_shutdown_grace_finish(processes):
    # A stop signal gives running slot jobs SHUTDOWN_GRACE_SECONDS; a recycle is no stop.
    jobs = enqueue_jobs([JobRequest("probe.io_wait", {"sleep": 2}) for _ in range(2)])
    relay_all()

    _run(processes, "--max-jobs=2", "--slots=2", env=child_env(JOBQUEUE_SHUTDOWN_GRACE_SECONDS="0.2"))

    ids = [job.id for job in jobs]
    assert list(Job.objects.filter(id__in=ids).values_list("status", "attempts").distinct()) == [
        ("completed", 1)
    ]
    assert Counter(
        Execution.objects.filter(job_id__in=ids).values_list("job_id", flat=True)
    ) == dict.fromkeys(ids, 1)
    assert not JobLog.objects.filter(job_id__in=ids, event="handed_back").exists()


def test_a_process_a_handler_left_a_thread_in_is_still_replaced(processes):
    """A worker process past its job count ends; a thread its handler started and left
    running (not a daemon) kept it waiting for ever, and its place served nothing more."""
    jobs = enqueue_jobs([JobRequest("probe.leave_thread") for _ in range(3)])
    relay_all()

    _run(processes, "--max-jobs=1")

    ids = [job.id for job in jobs]
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {"completed"}
    assert Execution.objects.filter(job_id__in=ids).values("pid").distinct().count() == 3

"""A fan-out and fan-in through the real processes: a relay and two worker processes (the
worker writes its completions with its next claim, in one round trip, so this is the path
the release takes in production)."""

import subprocess

import pytest

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.models import Job
from queue_app.services import JobRequest, chain, chord, enqueue_workflow
from queue_app.states import Status
from tests.helpers import child_env, kill_group, manage, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


def test_one_to_twenty_to_one_runs_each_step_once_and_the_callback_after_all_of_them(processes):
    header = [JobRequest("wf.add", {"value": n}) for n in range(20)]
    workflow = enqueue_workflow(
        chain(JobRequest("wf.add", {"value": 100}), chord(header, JobRequest("wf.collect")))
    )
    names = list(workflow.jobs)
    callback = workflow.jobs[names[-1]]
    env = child_env(JOBQUEUE_WORKER_BATCH_SIZE="5")
    processes.append(manage("runrelay", env=env, stderr=subprocess.DEVNULL))
    processes.append(
        manage("runworker", "--queues=default", "--concurrency=2", env=env, stderr=subprocess.DEVNULL)
    )

    wait_until(
        lambda: Job.objects.get(id=callback.id).status == Status.COMPLETED,
        timeout=60,
        message="the chord callback to complete",
    )
    for process in processes:
        kill_group(process)

    done = Job.objects.get(id=callback.id)
    assert done.result == {"results": [100 + n for n in range(20)], "names": names[1:21]}
    # Every step ran exactly once.
    ran = list(Execution.objects.values_list("job_id", flat=True))
    assert sorted(map(str, ran)) == sorted(str(job.id) for job in workflow.jobs.values())
    # No dependent started before all its dependencies completed.
    header_jobs = Job.objects.filter(id__in=[workflow.jobs[name].id for name in names[1:21]])
    assert done.started_at >= max(job.completed_at for job in header_jobs)
    first = Job.objects.get(id=workflow.jobs[names[0]].id)
    assert min(job.started_at for job in header_jobs) >= first.completed_at

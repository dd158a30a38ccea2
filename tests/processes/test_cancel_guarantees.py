"""A cancel of a running job, then a retry at once, never runs the job twice at the same time.

The operator's sequence that broke the promise (issue 30): a handler guarding each step
with ``except Exception``, a worker with two processes (or slots), the job cancelled while
it runs and retried at once. The cancel is a request its worker confirms (as procrastinate's
``abort_requested``): the job stays ``cancelling`` until the attempt has stopped, the
retry waits behind the confirmation, and the stop is an exception ``except Exception``
cannot swallow. Each handler journals its start and end (tests/probe/journal.py); the
test reads the journal and asserts that no two executions of the job overlap in time.
"""

import json
import subprocess

import pytest

from queue_app import services
from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job
from tests.helpers import child_env, manage, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


def executions(journal_dir, job_id) -> list[dict]:
    """The job's executions from the journal: start, end (None while running), outcome."""
    runs: dict[str, dict] = {}
    for path in journal_dir.glob("executions-*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "start" and record["job"] == str(job_id):
                runs[record["execution"]] = {"start": record["at"], "end": None, "outcome": None, **record}
            elif record["event"] == "end" and record["execution"] in runs:
                runs[record["execution"]].update(end=record["at"], outcome=record["outcome"])
    return sorted(runs.values(), key=lambda run: run["start"])


def events(job_id) -> list[str]:
    return list(JobLog.objects.filter(job_id=job_id).order_by("id").values_list("event", flat=True))


@pytest.mark.parametrize(
    ("job_type", "options"),
    [
        ("probe.steps", ["--concurrency", "2"]),
        ("probe.steps_io", ["--slots", "2"]),
        ("probe.steps_async", ["--slots", "2"]),
    ],
)
def test_cancel_then_retry_at_once_never_overlaps_the_two_runs(processes, tmp_path, job_type, options):
    # 15 s unless stopped; a stopped run tidies up for half a second before it ends.
    job = enqueue_job(job_type, {"steps": 150, "step": 0.1, "cleanup": 0.5})
    worker = manage(
        "runworker",
        *options,
        env=child_env(PROBE_JOURNAL_DIR=str(tmp_path), JOBQUEUE_HEARTBEAT_SECONDS="10"),
        stderr=subprocess.DEVNULL,
    )
    processes.extend([worker, manage("runrelay", stderr=subprocess.DEVNULL)])
    wait_until(lambda: Execution.objects.filter(job_id=job.id).exists(), timeout=60, message="the first run")

    assert services.cancel_job(job.id).status == "cancelling"
    retried = services.retry_job(job.id)
    # Still cancelling: the retry waits for the confirmation, nothing can claim the job yet.
    assert retried.status == "cancelling" and retried.retry_requested

    wait_until(lambda: Execution.objects.filter(job_id=job.id).count() == 2, timeout=30, message="the retry")
    runs = executions(tmp_path, job.id)
    first, second = runs[:2]
    assert first["end"] is not None, runs
    # The first run was stopped by the cancel (not by its steps running out), through the
    # handler's ``except Exception``, and ended before the retry started.
    assert first["outcome"] in ("CancelRequested", "CancelledError")
    assert first["end"] is not None and first["end"] <= second["start"]
    trail = events(job.id)
    assert trail.index("cancel_requested") < trail.index("retry_requested") < trail.index("cancel_confirmed")
    last_claim = len(trail) - 1 - trail[::-1].index("claimed")
    assert trail.index("cancel_confirmed") < trail.index("retried") < last_claim
    services.cancel_job(job.id)
    wait_until(lambda: Job.objects.get(id=job.id).status == "cancelled", timeout=30, message="a cancel again")

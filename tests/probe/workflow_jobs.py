"""Probe handlers for workflows: each reads its parents' results the way a step does."""

import os
import time

from queue_app.handlers import current_job, job_handler
from tests.probe.models import Execution


def _numbers(results) -> list:
    return [value for value in results if isinstance(value, (int, float))]


@job_handler("wf.add", max_attempts=1)
def add(payload):
    """Celery's ``add``: its own ``value`` plus every parent's result (a chain's running sum)."""
    job = current_job()
    Execution.objects.create(job_id=job.id, attempt=job.attempt, pid=os.getpid())
    return payload.get("value", 0) + sum(_numbers(job.parent_results().values()))


@job_handler("wf.collect", max_attempts=1)
def collect(payload):
    """A chord callback: the group's results, in group order, and the parents' names."""
    job = current_job()
    Execution.objects.create(job_id=job.id, attempt=job.attempt, pid=os.getpid())
    results = job.parent_results()
    return {"results": list(results.values()), "names": list(results)}


@job_handler("wf.fail", max_attempts=1)
def fail(payload):
    """Always fails (Celery's ``fail`` task)."""
    raise RuntimeError(payload.get("message", "expected failure"))


@job_handler("wf.sleep_then_add", max_attempts=1)
def sleep_then_add(payload):
    """Sleeps until a given epoch time, then returns its value: two processes finish together."""
    job = current_job()
    Execution.objects.create(job_id=job.id, attempt=job.attempt, pid=os.getpid())
    delay = float(payload.get("until", 0)) - time.time()
    if delay > 0:
        time.sleep(delay)
    return payload.get("value", 0)

"""Concurrency keys with real processes: round robin among keys, and per-key limits across
two worker processes (two `runworker` commands, as on two hosts), with the relay running."""

import subprocess

import pytest

from queue_app.engine.controls import set_queue_limits
from queue_app.models import Job, JobLog
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import child_env, kill_group, manage, relay_all, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


@pytest.fixture
def start_workers():
    """Start the relay and ``count`` worker commands on the default queue; stopped at the end."""
    env = child_env()
    started = [manage("runrelay", env=env, stderr=subprocess.DEVNULL)]

    def start(count: int):
        for _ in range(count):
            started.append(manage("runworker", "--queues=default", env=env, stderr=subprocess.DEVNULL))

    yield start
    for process in started:
        kill_group(process)


def start_order() -> list[str]:
    """Concurrency keys of the claimed jobs, in claim order (the claim's clock, then id)."""
    return list(
        JobLog.objects.filter(event="claimed")
        .order_by("created_at", "job__enqueued_at")
        .values_list("job__concurrency_key", flat=True)
    )


def test_one_keys_backlog_does_not_delay_another_keys_jobs(start_workers):
    """10,000 jobs of key A, then 10 of key B, one worker: B's jobs all start within the
    first 20 starts (each key has one job in line; a claim sends the key's next one to the
    back of the line)."""
    enqueue_jobs([JobRequest("probe.run", concurrency_key="A") for _ in range(10_000)])
    b_jobs = enqueue_jobs([JobRequest("probe.run", concurrency_key="B") for _ in range(10)])
    # One id per key is in line; the rest wait in PostgreSQL only.
    assert Job.objects.filter(parked=False).count() == 2
    relay_all()
    start_workers(1)
    wait_until(
        lambda: Job.objects.filter(id__in=[j.id for j in b_jobs], status="completed").count() == 10,
        timeout=120,
    )
    first = start_order()[:20]
    assert first.count("B") == 10, first


def test_a_key_limit_of_one_holds_across_two_worker_processes(start_workers):
    set_queue_limits("default", key_concurrency_limit=1)
    keyed = {
        key: [enqueue_job("probe.slot", {"sleep": 0.15}, concurrency_key=key) for _ in range(8)]
        for key in ("x", "y")
    }
    plain = [enqueue_job("probe.slot", {"sleep": 0.05}) for _ in range(8)]
    relay_all()
    start_workers(2)
    everything = [job.id for jobs in keyed.values() for job in jobs] + [job.id for job in plain]
    wait_until(lambda: Job.objects.filter(id__in=everything, status="completed").count() == 24, timeout=120)
    assert Execution.objects.filter(job_id__in=everything).count() == 24  # each ran once
    spans_by_key = {}
    for key, jobs in keyed.items():
        spans = []
        for job in jobs:
            logs = dict(JobLog.objects.filter(job_id=job.id).values_list("event", "created_at"))
            spans.append((logs["claimed"], logs["completed"]))
        spans.sort()
        for (_, completed), (next_claimed, _) in zip(spans, spans[1:], strict=False):
            assert completed <= next_claimed, f"two jobs of key {key} ran at once"
        spans_by_key[key] = spans
    # The limit is per key: jobs of x and y did run side by side (on the two workers).
    assert any(
        x_start < y_end and y_start < x_end
        for x_start, x_end in spans_by_key["x"]
        for y_start, y_end in spans_by_key["y"]
    )

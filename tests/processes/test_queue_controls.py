"""Queue controls across two real worker processes (two `runworker` commands, as on two hosts).

Pause keeps a queue's jobs queued and in place in Redis while the workers go
on with other queues; a concurrency limit of 1 never has two of the queue's
jobs running at once; a rate limit of N/s is never exceeded over any window of
the claim log (the token bucket's documented burst of max(1, N) allowed).
"""

import subprocess
from datetime import timedelta

import pytest

from queue_app import broker
from queue_app.engine.controls import pause_queue, resume_queue, set_queue_limits
from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job
from tests.helpers import child_env, kill_group, manage, ready_ids, relay_all, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

QUEUES = "default,other"


@pytest.fixture
def two_workers(queue_config):
    """Start two worker commands on both queues, and the relay; stops them at the end of the test.

    The relay is what puts back in line the jobs a worker hands back unrun (a batch
    released behind a slow job writes outbox rows): without it those stay queued
    in PostgreSQL only, and the test would wait for them for ever.
    """
    queue_config(QUEUES=QUEUES)
    env = child_env(JOBQUEUE_QUEUES=QUEUES)
    started = [manage("runrelay", env=env, stderr=subprocess.DEVNULL)]

    def start(*extra: str):
        for _ in range(2):
            worker = manage("runworker", f"--queues={QUEUES}", *extra, env=env, stderr=subprocess.DEVNULL)
            started.append(worker)
        return started

    yield start
    for process in started:
        kill_group(process)


def claim_times(queue: str) -> list:
    return list(
        JobLog.objects.filter(event="claimed", job__queue=queue)
        .order_by("created_at")
        .values_list("created_at", flat=True)
    )


def test_pause_keeps_jobs_queued_in_place_and_resume_runs_them(two_workers):
    jobs = [enqueue_job("probe.run", {"sleep": 0.05}, queue="default") for _ in range(30)]
    relay_all()
    two_workers()
    wait_until(lambda: Job.objects.filter(queue="default", status="completed").count() >= 3)

    pause_queue("default")
    # pause_queue returned after every claim in flight committed: no claim comes later.
    claims_at_pause = len(claim_times("default"))
    wait_until(lambda: not Job.objects.filter(queue="default", status="processing").exists())
    # Work on the other queue shows both workers kept looping (and popping) while paused.
    others = [enqueue_job("probe.run", queue="other") for _ in range(6)]
    relay_all()
    wait_until(lambda: Job.objects.filter(id__in=[j.id for j in others], status="completed").count() == 6)
    wait_until(lambda: broker.get_client().zcard(broker.inflight_key("default")) == 0)

    assert len(claim_times("default")) == claims_at_pause
    queued = set(Job.objects.filter(queue="default", status="queued").values_list("id", flat=True))
    assert queued, "the pause came after every job had run"
    # Still in line in Redis, each with its enqueue-order score.
    client = broker.get_client()
    in_redis = set(ready_ids(client, "default"))
    assert {str(job_id) for job_id in queued} == in_redis

    resume_queue("default")
    wait_until(
        lambda: Job.objects.filter(id__in=[j.id for j in jobs], status="completed").count() == 30,
        timeout=120,
    )
    # Each job ran once: a held-back id was put back, never claimed twice or lost.
    assert Execution.objects.filter(job_id__in=[j.id for j in jobs]).count() == 30


def test_a_concurrency_limit_of_one_holds_across_two_worker_processes(two_workers):
    set_queue_limits("default", concurrency_limit=1, rate_limit=None)
    limited = [enqueue_job("probe.slot", {"sleep": 0.15}, queue="default") for _ in range(12)]
    # Work on the other queue keeps each worker alternating, so both take limited jobs.
    for _ in range(12):
        enqueue_job("probe.slot", {"sleep": 0.05}, queue="other")
    relay_all()
    two_workers("--burst")
    wait_until(
        lambda: Job.objects.filter(id__in=[j.id for j in limited], status="completed").count() == 12,
        timeout=120,
    )
    runs = list(
        Execution.objects.filter(job_id__in=[j.id for j in limited])
        .order_by("started_at")
        .values_list("started_at", "finished_at", "pid")
    )
    assert len(runs) == 12
    for (_, finished, _), (next_started, _, _) in zip(runs, runs[1:], strict=False):
        assert finished <= next_started, "two jobs of a queue limited to 1 ran at once"
    # The processing intervals from the log trail (claimed .. completed) never overlap either.
    spans = []
    for job in limited:
        logs = dict(JobLog.objects.filter(job_id=job.id).values_list("event", "created_at"))
        spans.append((logs["claimed"], logs["completed"]))
    spans.sort()
    for (_, completed), (next_claimed, _) in zip(spans, spans[1:], strict=False):
        assert completed <= next_claimed


def test_a_rate_limit_is_not_exceeded_over_any_window(two_workers):
    rate = 5.0
    burst = max(1.0, rate)  # the bucket's documented capacity
    set_queue_limits("default", concurrency_limit=None, rate_limit=rate)
    jobs = [enqueue_job("probe.run", queue="default") for _ in range(25)]
    relay_all()
    two_workers("--burst")
    wait_until(
        lambda: Job.objects.filter(id__in=[j.id for j in jobs], status="completed").count() == 25,
        timeout=120,
    )
    times = claim_times("default")
    assert len(times) == 25
    # A token bucket of capacity B refilled at R/s allows at most B + R*T claims in any T seconds.
    for i, first in enumerate(times):
        for j in range(i, len(times)):
            window = (times[j] - first) / timedelta(seconds=1)
            assert j - i + 1 <= burst + rate * window + 1e-6, (i, j, window)
    # So 25 claims took at least (25 - burst) / rate seconds.
    assert times[-1] - times[0] >= timedelta(seconds=(25 - burst) / rate)

"""End to end: Redis is flushed, one reconcile run restores every job, real workers drain them all."""

import re
import subprocess
from collections import Counter
from datetime import timedelta

import pytest
from django.db.models import Count
from django.utils import timezone

from queue_app import broker
from queue_app.models import Job
from queue_app.states import Status
from tests.helpers import child_env, manage, relay_all, wait_until
from tests.probe.models import Execution
from tests.reconciler.support import enqueue, set_fields

# Jobs reach Redis through the relay, so "dispatched" means sent (no enqueuer push).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    pytest.mark.redis,
    pytest.mark.usefixtures("relay_path"),
]


def run(*args: str, timeout: float, **extra: str) -> str:
    env = child_env(JOBQUEUE_QUEUES="default,bulk:fifo", **extra)
    proc = manage(*args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out


def test_flushed_redis_is_rebuilt_and_workers_drain_every_job(redis_client):
    jobs = enqueue(980)
    # Some were scheduled and their time has come since; some are still waiting.
    set_fields([j.id for j in jobs[:100]], next_retry_at=timezone.now() - timedelta(minutes=5))
    # Far enough ahead that they are still waiting when the reconciler reads them, however slow
    # the machine; made due (in PostgreSQL and Redis) before the worker runs.
    waiting = enqueue(20, run_at=timezone.now() + timedelta(minutes=5))
    relay_all()
    assert redis_client.zcard(broker.priority_key("default")) == 980
    redis_client.flushdb()  # Redis restarted without persistence

    summary = run("reconcile_queue", timeout=120, JOBQUEUE_RECONCILE_GRACE_SECONDS="0.001")
    assert summary.startswith("reconcile: restored_ready=980 restored_retry=20 removed_stale=0 ")
    assert redis_client.zcard(broker.priority_key("default")) == 980
    assert redis_client.zcard(broker.retry_key("default")) == 20
    due = timezone.now()
    set_fields([j.id for j in waiting], next_retry_at=due)
    redis_client.zadd(broker.retry_key("default"), {str(j.id): broker.due_score(due) for j in waiting})

    run("runworker", "--burst", "--with-scheduled", "--queues", "default", "--concurrency", "1", timeout=300)

    assert Job.objects.filter(status=Status.COMPLETED).count() == 1000
    assert Execution.objects.count() == 1000
    assert not Execution.objects.values("job_id").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert redis_client.zcard(broker.priority_key("default")) == 0


def test_reconciler_racing_the_relay_and_workers_never_runs_a_job_twice(redis_client, tmp_path):
    """The reconciler loops with almost no grace while the relay and two workers run and jobs
    arrive; Redis is flushed mid-way and finished ids are pushed into it. Every duplicate this
    makes must be absorbed by the claim: each job runs exactly once."""
    env = child_env(JOBQUEUE_QUEUES="default,bulk:fifo", JOBQUEUE_RECONCILE_GRACE_SECONDS="0.001")
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    summaries = (tmp_path / "summaries").open("w")
    processes = [
        manage("runrelay", "--poll", "0.2", **quiet),
        manage(
            "reconcile_queue",
            "--loop",
            "--interval",
            "0.1",
            env=env,
            stdout=summaries,
            stderr=subprocess.DEVNULL,
        ),
        manage("runworker", "--queues", "default,bulk", "--concurrency", "2", **quiet),
    ]
    try:
        slow = {"payload": {"sleep": 0.02}}  # slow enough for a backlog to build up in Redis
        submitted = enqueue(40, **slow) + enqueue(10, queue="bulk", **slow)
        completed = Job.objects.filter(status=Status.COMPLETED)
        wait_until(completed.exists, timeout=60, message="relay and workers are up")
        submitted += enqueue(160, **slow) + enqueue(40, queue="bulk", **slow)
        wait_until(
            lambda: redis_client.zcard(broker.priority_key("default")) >= 50,
            timeout=30,
            message="a backlog in Redis",
        )
        redis_client.flushdb()  # the backlog is gone from Redis: only the reconciler can bring it back
        finished = [str(pk) for pk in completed.values_list("id", flat=True)[:10]]
        redis_client.zadd(broker.priority_key("default"), dict.fromkeys(finished, 0))
        redis_client.rpush(broker.fifo_key("bulk"), *finished)
        submitted += enqueue(40, **slow) + enqueue(10, queue="bulk", **slow)
        wait_until(
            lambda: Job.objects.filter(status=Status.COMPLETED).count() == len(submitted),
            timeout=90,
            message="every job completed",
        )
    finally:
        for proc in processes:
            proc.terminate()
        for proc in processes:
            proc.wait(timeout=30)

    assert Job.objects.count() == len(submitted) == 300
    runs = dict(Execution.objects.values_list("job_id").annotate(n=Count("id")).values_list("job_id", "n"))
    assert len(runs) == 300 and set(runs.values()) == {1}
    # Only the reconciler could bring back the flushed backlog.
    totals = Counter()
    for line in (tmp_path / "summaries").read_text().splitlines():
        totals.update({k: int(v) for k, v in re.findall(r"(\w+)=(\d+)\b", line) if k != "seconds"})
    assert totals["restored_ready"] > 0, totals

"""The whole queue against a real 3-master Redis Cluster (``REDIS_URL=redis+cluster://...``).

Two queues whose hash tags live on different masters (one priority, one strict FIFO):
enqueue, the relay, two worker processes serving both queues, a FLUSHALL of every master,
the reconciler, then every job completed exactly once. Any script or multi-key command
that touched keys of two slots would fail here with CROSSSLOT.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from queue_app import broker
from queue_app.api.health import check_redis
from queue_app.engine.stats import queue_stats
from queue_app.models import Job, OutboxMessage
from queue_app.services import enqueue_job
from tests.helpers import PROJECT_ROOT, Events, child_env, kill_group, manage, wait_until
from tests.probe.models import Effect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

CANDIDATE_QUEUES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def _queues_on_two_masters(client) -> tuple[str, str]:
    """Two queue names whose keys hash to slots served by different masters."""
    first = CANDIDATE_QUEUES[0]
    first_node = client.get_node_from_key(broker.priority_key(first)).name
    for other in CANDIDATE_QUEUES[1:]:
        if client.get_node_from_key(broker.priority_key(other)).name != first_node:
            return first, other
    raise AssertionError("every candidate queue hashed to one master")


def _enqueue(queues: tuple[str, str], count: int, *, delayed: int = 0) -> list[Job]:
    """``count`` jobs per queue, the first ``delayed`` of each due in 3 s (the retry set)."""
    jobs = []
    for queue in queues:
        for index in range(count):
            run_at = timezone.now() + timedelta(seconds=3) if index < delayed else None
            priority = ("high", "medium", "low")[index % 3]
            job = enqueue_job("probe.effect", {"n": index}, queue=queue, priority=priority, run_at=run_at)
            jobs.append(job)
    return jobs


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0


def _all_completed(jobs: list[Job]) -> bool:
    return Job.objects.filter(id__in=[job.id for job in jobs], status="completed").count() == len(jobs)


def test_enqueue_relay_workers_flush_and_reconcile_on_a_cluster(redis_cluster, settings):
    cluster = broker.connect(redis_cluster["url"], decode_responses=True)
    queues = _queues_on_two_masters(cluster)
    # "default" too: the probe app's django.tasks declare it.
    queue_setting = f"default,{queues[0]},{queues[1]}:fifo"
    settings.REDIS_URL = redis_cluster["url"]
    settings.JOBQUEUE = {**settings.JOBQUEUE, "QUEUES": queue_setting}
    assert broker.is_cluster(broker.get_client())
    assert check_redis() == "ok"
    env = child_env(
        REDIS_URL=redis_cluster["url"],
        CACHE_URL=settings.CACHE_URL,
        JOBQUEUE_QUEUES=queue_setting,
        # A grace of a microsecond: with a longer one, a delayed job falling due just as
        # the reconciler reads it is left for the next run (rightly, in production: it
        # may be in flight), and this single run would restore fewer than all.
        JOBQUEUE_RECONCILE_GRACE_SECONDS="0.000001",
        LOG_LEVEL="INFO",
    )
    started: list[subprocess.Popen] = []

    def start(*args: str) -> Events:
        process = manage(*args, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        started.append(process)
        return Events(process)

    def start_workers() -> list[subprocess.Popen]:
        workers = ",".join(queues)
        events = [
            start("runworker", "--queues", workers, "--concurrency", "2"),
            start("runworker", "--queues", workers),
        ]
        # Up before the test may stop them: a SIGTERM while Django still loads
        # would kill a process before it handles the signal.
        for each in events:
            wait_until(lambda each=each: each.named("worker_started"), timeout=60, message="a worker")
        return [each.process for each in events]

    try:
        # 1. Enqueue, relay and two workers, both queues, some jobs through the retry set.
        first = _enqueue(queues, 15, delayed=3)
        start("runrelay")
        workers = start_workers()
        wait_until(lambda: _all_completed(first), timeout=120, message="the first jobs to complete")
        for worker in workers:
            _stop(worker)

        # 2. Jobs relayed to the cluster, then every master flushed: the schedule is gone.
        second = _enqueue(queues, 20, delayed=4)
        wait_until(
            lambda: not OutboxMessage.objects.filter(dispatched_at__isnull=True).exists(),
            message="the relay to send the second jobs",
        )
        depths = queue_stats().redis
        assert depths[queues[0]]["priority"] + depths[queues[0]]["retry"] == 20
        assert depths[queues[1]]["fifo"] + depths[queues[1]]["retry"] == 20
        for port in redis_cluster["ports"]:
            redis.Redis(port=port).flushall()
        assert sum(sum(by_structure.values()) for by_structure in queue_stats().redis.values()) == 0

        # 3. The reconciler restores every queued job from PostgreSQL, on the right master
        # (a delayed one to the retry set, or to the ready structure once it is due).
        reconcile = subprocess.run(
            [sys.executable, str(PROJECT_ROOT / "manage.py"), "reconcile_queue"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert reconcile.returncode == 0, reconcile.stderr[-2000:]
        depths = queue_stats().redis
        assert depths[queues[0]]["priority"] + depths[queues[0]]["retry"] == 20, reconcile.stdout
        assert depths[queues[1]]["fifo"] + depths[queues[1]]["retry"] == 20, reconcile.stdout

        # 4. Workers again: everything runs.
        workers = start_workers()
        wait_until(lambda: _all_completed(second), timeout=120, message="the restored jobs to complete")
        for worker in workers:
            _stop(worker)
    finally:
        for process in started:
            kill_group(process)

    # Exactly once: each job completed, with the one effect its completion commits.
    jobs = first + second
    assert _all_completed(jobs)
    effects = list(Effect.objects.values_list("job_id", flat=True))
    assert sorted(effects) == sorted(job.id for job in jobs)
    for queue in queues:
        assert cluster.zcard(broker.inflight_key(queue)) == 0
    cluster.close()

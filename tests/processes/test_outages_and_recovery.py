"""Relay and workers ride out store outages; a restarted worker settles its old jobs at once."""

import os
import signal
import subprocess
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queue_app.models import Job, JobLog
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import Events, child_env, kill_group, manage, ready_score, relay_all, wait_until
from tests.probe.models import Execution
from tests.reconciler.proxy import postgres_proxy, postgres_via, redis_proxy, redis_via

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


def start(*args: str, **env: str) -> tuple[subprocess.Popen, Events]:
    process = manage(*args, env=child_env(**{"LOG_LEVEL": "INFO", **env}), stderr=subprocess.PIPE, text=True)
    return process, Events(process)


def start_behind(postgres_link, *args: str, **env: str) -> tuple[subprocess.Popen, Events]:
    """Start a command that reaches PostgreSQL through ``postgres_link``, which the test cuts."""
    url = postgres_via(connection.settings_dict, postgres_link)
    return start(*args, DATABASE_URL=url, DATABASE_POOL_TIMEOUT="1", **env)


@pytest.fixture
def postgres_link():
    proxy = postgres_proxy(connection.settings_dict)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def redis_link():
    proxy = redis_proxy(child_env()["REDIS_URL"])
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        kill_group(process)


def test_relay_rides_out_a_postgres_outage(postgres_link, children, redis_client):
    relay, events = start_behind(postgres_link, "runrelay", "--poll=0.2", LOG_LEVEL="DEBUG")
    children.append(relay)
    wait_until(lambda: events.named("relay_started"), message="relay to start")
    postgres_link.stop()
    job = enqueue_job("demo.echo")  # the test's own connection is not cut
    wait_until(lambda: events.named("store_unavailable"), timeout=30, message="the outage to be noticed")
    # Several failed rounds: the relay must neither exit nor log each one above debug level.
    wait_until(
        lambda: len(events.named("store_still_unavailable")) >= 2, timeout=60, message="3 failed rounds"
    )
    assert relay.poll() is None
    assert len(events.named("store_unavailable")) == 1
    postgres_link.start()
    wait_until(lambda: ready_score(redis_client, str(job.id)) is not None, timeout=30)
    [recovered] = wait_until(lambda: events.named("store_available_again"), timeout=10)
    assert recovered["after_failures"] >= 3


def test_a_worker_started_while_postgres_is_down_stops_cleanly_on_sigterm(postgres_link, children):
    """Its supervisor waits for PostgreSQL (the worker name's lock) with its stop signals
    already handled: SIGTERM ends the wait and the process exits 0, not killed by the signal."""
    postgres_link.stop()
    worker, events = start_behind(postgres_link, "runworker")
    children.append(worker)
    wait_until(lambda: events.named("store_unavailable"), timeout=30, message="the supervisor to wait")
    assert not events.named("worker_process_started")
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    wait_until(lambda: events.named("supervisor_stopped"), timeout=5, message="the stop to be logged")
    assert not events.named("worker_process_started")


def test_worker_rides_out_a_redis_outage(redis_link, children):
    worker, events = start(
        "runworker", REDIS_URL=redis_via(child_env()["REDIS_URL"], redis_link), LOG_LEVEL="DEBUG"
    )
    children.append(worker)
    wait_until(lambda: events.named("worker_started"), message="worker to start")
    redis_link.stop()
    wait_until(lambda: events.named("store_unavailable"), timeout=30, message="the outage to be noticed")
    job = enqueue_job("demo.echo", {"after": "outage"})
    relay_all()  # straight to Redis, which is up: only the worker's path is cut
    tried = len(events.named("store_still_unavailable"))
    wait_until(
        lambda: len(events.named("store_still_unavailable")) >= tried + 2, message="two more failed rounds"
    )
    assert worker.poll() is None and Job.objects.get(id=job.id).status == "queued"
    redis_link.start()
    wait_until(
        lambda: Job.objects.get(id=job.id).status == "completed", timeout=30, message="job after recovery"
    )


def test_a_worker_whose_redis_stops_answering_keeps_extending_its_leases(redis_link, children):
    """A partition from Redis alone (requests unanswered until the socket times out, 30 s)
    stalls the worker's Redis upkeep, never its leases: with a lease of 2 s, a heartbeat
    waiting behind the upkeep would let the running job's lease lapse and have it rescued
    and run again, for an outage PostgreSQL never saw."""
    worker, events = start(
        "runworker",
        REDIS_URL=redis_via(child_env()["REDIS_URL"], redis_link),
        JOBQUEUE_LEASE_SECONDS="2",
        JOBQUEUE_HEARTBEAT_SECONDS="0.5",
    )
    children.append(worker)
    wait_until(lambda: events.named("worker_started"), message="worker to start")
    job = enqueue_job("demo.sleep", {"seconds": 7})
    wait_until(
        lambda: Job.objects.get(id=job.id).status == "processing", timeout=30, message="the job to start"
    )
    fence = Job.objects.get(id=job.id).fence
    redis_link.freeze()
    try:
        for _ in range(8):  # two lease lengths
            time.sleep(0.5)
            running = Job.objects.get(id=job.id)
            assert running.status == "processing" and running.fence == fence
            assert running.lease_expires_at > timezone.now() + timedelta(seconds=0.5), "lease not extended"
    finally:
        redis_link.thaw()
    wait_until(lambda: Job.objects.get(id=job.id).status == "completed", timeout=30, message="the job to end")
    assert Job.objects.get(id=job.id).attempts == 1


def test_completion_written_while_postgres_is_down_is_kept_and_written_later(postgres_link, children):
    job = enqueue_job("demo.sleep", {"seconds": 2})
    relay_all()
    worker, events = start_behind(postgres_link, "runworker", LOG_LEVEL="DEBUG")
    children.append(worker)
    # Its handler running, not only claimed: a start late after the claim writes to PostgreSQL.
    wait_until(lambda: events.named("job_started"), message="job to start")
    postgres_link.stop()  # the handler finishes while PostgreSQL is unreachable
    wait_until(lambda: events.named("store_unavailable"), timeout=30, message="the failed completion")
    assert Job.objects.get(id=job.id).status == "processing"  # not reported completed
    postgres_link.start()
    wait_until(lambda: Job.objects.get(id=job.id).status == "completed", timeout=30, message="completion")
    job.refresh_from_db()
    assert job.attempts == 1 and job.result == {"slept": 2.0}


def test_a_job_starting_late_while_postgres_is_down_runs_and_is_settled_once(postgres_link, children):
    """A job claimed with others starts after them and then records its start time. With
    PostgreSQL cut at that moment it runs anyway and is settled once the store is back: not
    dropped to wait out its lease and be charged an attempt it never had."""
    worker, events = start_behind(postgres_link, "runworker", LOG_LEVEL="DEBUG")
    children.append(worker)
    warm_up = [enqueue_job("demo.echo", {"n": n}) for n in range(5)]
    wait_until(
        lambda: Job.objects.filter(id__in=[job.id for job in warm_up], status="completed").count() == 5,
        message="warm-up jobs",
    )  # short jobs so far: the worker now claims several at once
    slow, late = enqueue_jobs(  # one push, so one claim takes both
        [JobRequest(type="demo.sleep", payload={"seconds": 2}), JobRequest(type="demo.echo")]
    )
    wait_until(
        lambda: any(event["job_id"] == str(slow.id) for event in events.named("job_started")),
        message="the slow job to start",
    )
    assert Job.objects.get(id=late.id).status == "processing"  # claimed with it, waiting
    postgres_link.stop()
    wait_until(  # its main loop meets the outage once it is through the claimed jobs
        lambda: [e for e in events.named("store_unavailable") if e["process"].startswith("worker ")],
        timeout=30,
        message="the worker to meet the outage",
    )
    postgres_link.start()
    wait_until(
        lambda: Job.objects.filter(id__in=[slow.id, late.id], status="completed").count() == 2,
        timeout=30,
        message="both settled after the outage",
    )
    for job in (slow, late):
        job.refresh_from_db()
        assert job.attempts == 1 and job.last_error == ""
    assert late.result == {}
    [skipped] = events.named("job_start_time_not_recorded")
    assert skipped["job_id"] == str(late.id)


def test_worker_restarted_with_the_same_name_settles_its_old_job_once_its_lease_ends(children):
    """Issue 30 item 2: the earlier process may still run its job (cut off from PostgreSQL, its
    session already gone), so a replacement under the same name must not settle it while its
    lease holds; once the lease has run out, it does, without waiting for a reconcile pass."""
    env = child_env(JOBQUEUE_LEASE_SECONDS="8", JOBQUEUE_HEARTBEAT_SECONDS="1")
    job = enqueue_job("probe.run", {"sleep": 60})
    relay_all()
    first = manage("runworker", "--name=steady", env=env, stderr=subprocess.DEVNULL)
    children.append(first)
    wait_until(lambda: Job.objects.get(id=job.id).status == "processing", message="job to start")
    os.killpg(first.pid, signal.SIGKILL)  # supervisor and child die without a word
    first.wait()
    job.refresh_from_db()
    assert job.status == "processing" and job.lease_expires_at is not None
    second = manage("runworker", "--name=steady", env=env, stderr=subprocess.DEVNULL)
    children.append(second)
    # While the lease holds, the job stays with the earlier process's attempt.
    while timezone.now() < job.lease_expires_at - timedelta(seconds=1):
        current = Job.objects.get(id=job.id)
        assert (current.status, current.fence) == ("processing", job.fence)
        time.sleep(0.2)
    # Then it is settled: by the replacement's recovery, or by the queue's lease rescue
    # (its maintenance leader), whichever comes first.
    wait_until(
        lambda: JobLog.objects.filter(
            job_id=job.id, event__in=["retry_scheduled", "lease_expired_requeued"]
        ).exists(),
        timeout=20,
    )
    job.refresh_from_db()
    assert job.last_error_class in (
        "queue_app.exceptions.WorkerProcessDied",
        "queue_app.exceptions.LeaseLost",
    )


def test_a_worker_process_dies_with_its_supervisor_so_a_restart_never_overlaps_it(children):
    """The supervisor alone is killed. Its worker process, left to finish its job, ran on
    beside the restarted worker of the same name, which settled the name's jobs and ran that
    job again: twice at the same time. (The restart now also waits for the job's lease.)"""
    env = child_env(JOBQUEUE_LEASE_SECONDS="4", JOBQUEUE_HEARTBEAT_SECONDS="1")
    job = enqueue_job("probe.run", {"sleep": 4})
    relay_all()
    first = manage("runworker", "--name=steady", env=env, stderr=subprocess.DEVNULL)
    children.append(first)
    wait_until(lambda: Execution.objects.filter(job_id=job.id).exists(), message="job to start")
    orphan = Execution.objects.get(job_id=job.id).pid
    os.kill(first.pid, signal.SIGKILL)  # the supervisor only
    first.wait()
    relay = manage("runrelay", stderr=subprocess.DEVNULL)
    second = manage("runworker", "--name=steady", env=env, stderr=subprocess.DEVNULL)
    children.extend([relay, second])
    wait_until(lambda: not _alive(orphan), timeout=5, message="the worker process to die with its supervisor")
    wait_until(lambda: Job.objects.get(id=job.id).status == "completed", timeout=30, message="the rerun")
    runs = list(Execution.objects.filter(job_id=job.id).order_by("attempt"))
    assert [run.attempt for run in runs] == [1, 2]
    assert runs[0].finished_at is None  # killed with its supervisor, not finished beside the rerun


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie no one has reaped yet does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False

"""Real worker and relay processes: signals, hard time limits, crash windows, volume."""

import signal
import subprocess
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queue_app import broker
from queue_app.models import Job, OutboxMessage
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import child_env, kill_group, manage, relay_all, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

# A burst worker that also waits for retries due shortly.
WAIT_FOR_RETRIES = ("--with-scheduled",)


def status_of(job) -> str:
    return Job.objects.values_list("status", flat=True).get(id=job.id)


def stop(process: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 60) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    return process.wait(timeout=timeout)


def test_sigterm_lets_the_running_job_finish(processes):
    job = enqueue_job("probe.run", {"sleep": 1.5})
    relay_all()
    worker = manage("runworker", stderr=subprocess.DEVNULL)
    processes.append(worker)
    # Its handler running, not only claimed: a job claimed but not yet started is handed back.
    wait_until(lambda: Execution.objects.filter(job_id=job.id).exists(), message="job to start")
    assert stop(worker) == 0
    assert status_of(job) == "completed"


# A handler sleeping in Python, and one waiting inside a query: the stop interrupts the
# query and leaves its connection busy, which the hand-back must not use.
@pytest.mark.parametrize("job_type", ["probe.run", "probe.db_sleep"])
def test_sigterm_past_the_grace_period_hands_the_job_back(processes, job_type):
    job = enqueue_job(job_type, {"sleep": 60})
    relay_all()
    worker = manage(
        "runworker", env=child_env(JOBQUEUE_SHUTDOWN_GRACE_SECONDS="0.5"), stderr=subprocess.DEVNULL
    )
    processes.append(worker)
    # Inside the handler (and for probe.db_sleep inside its query), not only claimed.
    wait_until(lambda: Execution.objects.filter(job_id=job.id).exists(), message="job to start")
    if job_type == "probe.db_sleep":
        wait_until(lambda: _queries_running("SELECT pg_sleep%") == 1, message="the query to start")
    assert stop(worker) == 0
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 0 and job.worker_id == ""
    assert OutboxMessage.objects.filter(job=job, action="enqueue", dispatched_at__isnull=True).exists()
    # The interrupted query was cancelled, not left running on the server for no one.
    wait_until(lambda: _queries_running("SELECT pg_sleep%") == 0, timeout=5, message="no pg_sleep left")


def _queries_running(pattern: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s "
            "AND datname = current_database()",
            [pattern],
        )
        return cursor.fetchone()[0]


def test_handler_that_swallows_the_soft_limit_is_killed_and_the_worker_goes_on(processes):
    stubborn = enqueue_job("probe.stubborn")
    after = enqueue_job("demo.echo", {"after": True})
    relay_all()
    worker = manage(
        "runworker", env=child_env(JOBQUEUE_HARD_TIME_LIMIT_GRACE_SECONDS="1"), stderr=subprocess.DEVNULL
    )
    relay = manage("runrelay", stderr=subprocess.DEVNULL)  # re-sends the handed-back job
    processes.extend([worker, relay])
    wait_until(lambda: status_of(after) == "completed", timeout=60, message="the next job to run")
    stubborn.refresh_from_db()
    assert stubborn.status == "failed" and "process killed" in stubborn.last_error
    # An importable class (django.tasks loads it as the error's exception_class).
    assert stubborn.last_error_class == "queue_app.exceptions.JobTimeLimitExceeded"
    stop(worker)


def test_a_killed_child_hands_back_the_jobs_claimed_with_its_stuck_one_uncounted(processes, relay_path):
    """The supervisor learns what a killed child held from PostgreSQL: the jobs claimed
    in the stubborn job's batch go back as not started (attempts 0, 'handed_back'), not
    as a failed attempt of a dead process."""
    # Claim far ahead and never release, so the batch stays held behind the stubborn job.
    worker = manage(
        "runworker",
        env=child_env(
            JOBQUEUE_HARD_TIME_LIMIT_GRACE_SECONDS="1",
            JOBQUEUE_WORKER_CLAIM_AHEAD_SECONDS="600",
            JOBQUEUE_WORKER_RELEASE_AFTER_SECONDS="600",
        ),
        stderr=subprocess.DEVNULL,
    )
    processes.append(worker)
    warm_up = enqueue_job("probe.run")  # a first job, so the worker claims batches
    relay_all()
    wait_until(lambda: status_of(warm_up) == "completed", message="the warm-up job")
    stubborn = enqueue_job("probe.stubborn", priority="high")
    waiting = enqueue_jobs([JobRequest(type="probe.run") for _ in range(2)])
    relay_all()  # one push of all three: the worker's next pop takes them as one batch
    wait_until(lambda: Execution.objects.filter(job_id=stubborn.id).exists(), message="the stubborn job")
    assert {status_of(job) for job in waiting} == {"processing"}
    wait_until(
        lambda: not Job.objects.filter(status="processing").exists(), timeout=60, message="the hard kill"
    )
    assert status_of(stubborn) == "failed"
    for job in waiting:
        job.refresh_from_db()
        assert job.status == "queued" and job.attempts == 0
        assert list(job.logs.values_list("event", flat=True)) == ["enqueued", "claimed", "handed_back"]
    relay_all()  # the hand-backs' outbox rows
    wait_until(lambda: {status_of(job) for job in waiting} == {"completed"}, message="the batch to run")
    assert all(Execution.objects.filter(job_id=job.id).count() == 1 for job in waiting)
    assert stop(worker) == 0


def test_a_retry_falls_due_and_is_made_ready_while_the_only_worker_runs_a_long_job(processes, redis_client):
    """The upkeep (retries due -> ready) runs in the worker's heartbeat thread, not only
    between jobs: another worker of the queue could take the due job meanwhile."""
    worker = manage("runworker", stderr=subprocess.DEVNULL)
    processes.append(worker)
    long_job = enqueue_job("probe.run", {"sleep": 15})
    wait_until(lambda: status_of(long_job) == "processing", message="the long job to start")
    # Due after the relay (below) has surely put it in the retry set, even on a loaded machine.
    due_soon = enqueue_job("probe.run", run_at=timezone.now() + timedelta(seconds=3))
    relay_all()  # the scheduled job's outbox row puts it in the retry set
    assert redis_client.zscore(broker.retry_key("default"), str(due_soon.id)) is not None

    def made_ready() -> bool:
        members = redis_client.zrange(broker.priority_key("default"), 0, -1)
        return str(due_soon.id) in {broker.member_job_id(member) for member in members}

    wait_until(made_ready, timeout=10, message="the due job to be made ready")
    assert status_of(long_job) == "processing"
    stop(worker, signal.SIGKILL)


def test_job_committed_before_a_crash_runs_once_a_relay_runs(processes):
    # The enqueuing process commits and dies before any relay ran.
    script = (
        "import django, os, signal; django.setup();"
        "from queue_app.services import enqueue_job;"
        "print(enqueue_job('probe.run').id, flush=True);"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    import sys

    crashed = subprocess.run(
        [sys.executable, "-c", script], env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert crashed.returncode == -signal.SIGKILL
    job_id = crashed.stdout.strip()
    relay = manage("runrelay", stderr=subprocess.DEVNULL)
    worker = manage("runworker", stderr=subprocess.DEVNULL)
    processes.extend([relay, worker])
    wait_until(lambda: Job.objects.filter(id=job_id, status="completed").exists(), message="job to complete")
    assert Execution.objects.filter(job_id=job_id).count() == 1


def test_relay_killed_between_push_and_mark_resends_and_each_job_runs_once(processes):
    jobs = enqueue_jobs([JobRequest(type="probe.run") for _ in range(50)])
    # Its claim on the rows runs out 2 s after it dies (the default holds them 45 s).
    doomed = manage(
        "runrelay",
        env=child_env(JOBSITE_FAILPOINTS="relay.after_push=kill", JOBQUEUE_RELAY_CLAIM_SECONDS="2"),
        stderr=subprocess.DEVNULL,
    )
    assert doomed.wait(timeout=60) == -signal.SIGKILL
    # Pushed to Redis, but still undispatched in PostgreSQL: the next relay re-sends.
    assert OutboxMessage.objects.filter(dispatched_at__isnull=True).count() == 50
    relay = manage("runrelay", stderr=subprocess.DEVNULL)
    worker = manage("runworker", stderr=subprocess.DEVNULL)
    processes.extend([relay, worker])
    wait_until(lambda: Job.objects.filter(status="completed").count() == 50, timeout=60, message="all jobs")
    wait_until(lambda: not OutboxMessage.objects.filter(dispatched_at__isnull=True).exists())
    stop(worker)
    counts = {str(job.id): Execution.objects.filter(job_id=job.id).count() for job in jobs}
    assert set(counts.values()) == {1}


def test_two_relays_and_three_workers_drain_five_thousand_jobs_exactly_once(processes):
    relays = [manage("runrelay", stderr=subprocess.DEVNULL) for _ in range(2)]
    workers = [
        manage(
            "runworker",
            f"--name=e2e-{i}",
            env=child_env(JOBQUEUE_WORKER_BATCH_SIZE="50"),
            stderr=subprocess.DEVNULL,
        )
        for i in range(3)
    ]
    processes.extend(relays + workers)
    for _ in range(5):
        enqueue_jobs([JobRequest(type="probe.run") for _ in range(1000)])
    wait_until(
        lambda: Job.objects.filter(status="completed").count() == 5000,
        timeout=240,
        interval=0.5,
        message="5,000 jobs",
    )
    for process in workers + relays:
        assert stop(process) == 0
    assert not Job.objects.exclude(status="completed").exists()
    per_job = Execution.objects.values("job_id").distinct().count()
    assert per_job == 5000 and Execution.objects.count() == 5000
    workers_used = set(Job.objects.values_list("logs__extra__worker", flat=True)) - {None}
    assert len({worker.split("/")[0] for worker in workers_used}) == 3


# How each way of ending shows in last_error (the child's traceback, or the supervisor's cause).
POISON = {
    "system_exit": "SystemExit: 1",
    "keyboard_interrupt": "KeyboardInterrupt",
    "generator_exit": "GeneratorExit",
    "close_connection": "RuntimeError: closed the database connection",
    "unstorable_message": "ValueError: cannot read report-\\udcff.csv\\x00",
    "os_exit": "WorkerProcessDied: the worker process exited with code 3",
    "segfault": "WorkerProcessDied: the worker process was killed by SIGSEGV",
    "oom_kill": "WorkerProcessDied: the worker process was killed by SIGKILL (the out-of-memory killer",
}


@pytest.mark.parametrize("how", POISON)
def test_a_poison_job_uses_up_its_attempts_and_fails_while_others_run(processes, how):
    poison = enqueue_job("probe.poison", {"how": how})  # max_attempts=2
    others = enqueue_jobs([JobRequest(type="probe.run") for _ in range(3)])
    relay_all()
    relay = manage("runrelay", stderr=subprocess.DEVNULL)  # carries the retry's outbox row
    worker = manage("runworker", "--burst", *WAIT_FOR_RETRIES, stderr=subprocess.DEVNULL)
    processes.extend([relay, worker])
    assert worker.wait(timeout=120) == 0  # the burst worker ends: nothing loops
    poison.refresh_from_db()
    assert poison.status == "failed" and poison.attempts == 2
    assert POISON[how] in poison.last_error
    # The class's import path: the handler's exception, or the supervisor's cause for a dead process.
    name = POISON[how].split(":")[0]
    module = "queue_app.exceptions" if name == "WorkerProcessDied" else "builtins"
    assert poison.last_error_class == f"{module}.{name}"
    assert Execution.objects.filter(job_id=poison.id).count() == 2
    assert list(poison.logs.values_list("event", flat=True)) == [
        "enqueued",
        "claimed",
        "retry_scheduled",
        "claimed",
        "failed",
    ]
    assert {status_of(job) for job in others} == {"completed"}


def test_ids_popped_by_a_worker_killed_before_its_claim_come_back_without_the_reconciler(
    processes, redis_client
):
    job = enqueue_job("probe.run")
    relay_all()
    doomed = manage(
        "runworker", env=child_env(JOBSITE_FAILPOINTS="worker.after_pop=kill"), stderr=subprocess.DEVNULL
    )
    processes.append(doomed)
    # The child moves the id into the in-flight set, then SIGKILLs itself before claiming.
    wait_until(
        lambda: redis_client.zscore(broker.inflight_key("default"), str(job.id)) is not None,
        message="the pop",
    )
    kill_group(doomed)
    assert status_of(job) == "queued" and redis_client.zcard(broker.priority_key("default")) == 0
    # No reconciler runs: the next worker's sweep returns the id once its deadline passes
    # (INFLIGHT_SECONDS), well inside this bound (a reconciler would need its grace + interval).
    worker = manage("runworker", stderr=subprocess.DEVNULL)
    processes.append(worker)
    wait_until(lambda: status_of(job) == "completed", timeout=30, message="the job to run")
    job.refresh_from_db()
    assert job.attempts == 1 and Execution.objects.filter(job_id=job.id).count() == 1
    assert redis_client.zcard(broker.inflight_key("default")) == 0
    stop(worker)


def test_short_jobs_are_not_held_behind_a_long_one(processes):
    """Default settings, 2 worker processes: a 30 s job claimed in a batch does not keep
    the jobs claimed with it from the idle process (Oban's demand-based fetch)."""
    first = enqueue_jobs([JobRequest(type="probe.run") for _ in range(20)])
    long = enqueue_job("probe.run", {"sleep": 30})
    rest = enqueue_jobs([JobRequest(type="probe.run") for _ in range(20)])
    relay_all()
    worker = manage("runworker", "--concurrency", "2", stderr=subprocess.DEVNULL)
    relay = manage("runrelay", stderr=subprocess.DEVNULL)  # carries released jobs back to Redis
    processes.extend([worker, relay])
    short = [job.id for job in first + rest]
    wait_until(
        lambda: Job.objects.filter(id__in=short, status="completed").count() == 40,
        timeout=25,  # the long job is still sleeping at this point
        message="the 40 short jobs",
    )
    assert status_of(long) == "processing"
    assert not Execution.objects.filter(job_id=long.id, finished_at__isnull=False).exists()
    assert Execution.objects.filter(job_id__in=short).count() == 40
    # A claimed job that was released went back uncounted and ran once.
    assert set(Job.objects.filter(id__in=short).values_list("attempts", flat=True)) == {1}


def test_a_second_worker_with_a_running_workers_name_is_refused(processes):
    first = manage("runworker", "--name=twin", stderr=subprocess.DEVNULL)
    processes.append(first)
    job = enqueue_job("probe.run")
    relay_all()
    wait_until(lambda: status_of(job) == "completed", message="the first worker to run")
    second = manage("runworker", "--name=twin", stderr=subprocess.PIPE, text=True)
    processes.append(second)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 1
    assert "--name: a worker named 'twin' is already running" in err
    assert first.poll() is None  # the first one is untouched
    # Once the first is gone (even by SIGKILL, children included), the name is free again.
    kill_group(first)
    third = manage("runworker", "--name=twin", "--burst", stderr=subprocess.DEVNULL)
    processes.append(third)
    assert third.wait(timeout=60) == 0


def test_burst_exits_when_nothing_is_due_and_with_scheduled_waits(processes, redis_client):
    from datetime import timedelta

    from django.utils import timezone

    later = enqueue_job("probe.run", run_at=timezone.now() + timedelta(hours=1))
    now = enqueue_job("probe.run")
    relay_all()
    burst = manage("runworker", "--burst", stderr=subprocess.DEVNULL)
    processes.append(burst)
    assert burst.wait(timeout=60) == 0  # as RQ's burst and Oban's drain: what is due, then exit
    assert status_of(now) == "completed"
    assert status_of(later) == "queued"
    # --with-scheduled waits for what is scheduled (here: brought forward to seconds from now).
    due = timezone.now() + timedelta(seconds=2)
    Job.objects.filter(id=later.id).update(next_retry_at=due)
    redis_client.zadd(broker.retry_key("default"), {str(later.id): broker.due_score(due)})
    waiting = manage("runworker", "--burst", "--with-scheduled", stderr=subprocess.DEVNULL)
    processes.append(waiting)
    assert waiting.wait(timeout=60) == 0
    assert status_of(later) == "completed"


def test_a_flood_in_one_queue_does_not_stop_another(processes, queue_config):
    queue_config(QUEUES="default,flood,trickle")
    env = child_env(JOBQUEUE_QUEUES="default,flood,trickle")
    enqueue_jobs([JobRequest(type="probe.run", queue="flood") for _ in range(3000)])
    relay_all()
    worker = manage("runworker", "--queues=flood,trickle", env=env, stderr=subprocess.DEVNULL)
    processes.append(worker)
    wait_until(lambda: Job.objects.filter(queue="flood", status="completed").exists(), message="a start")
    trickle = enqueue_job("probe.run", queue="trickle")
    relay_all()
    wait_until(lambda: status_of(trickle) == "completed", timeout=60, message="the other queue's job")
    # Served while the flood was still being drained, not after it.
    assert Job.objects.filter(queue="flood", status="queued").count() > 1000

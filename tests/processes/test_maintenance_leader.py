"""Maintenance under one leader, with real worker processes: one of three leads (and alone
promotes due retries), a SIGKILLed leader is replaced within seconds, and a dead
worker's job is rescued seconds after its lease ran out, with no reconcile pass.

Oban's model (peer.ex elects one leader; lifeline.ex and stager.ex run only there),
here with a lease row per queue (queue_app/runtime/maintenance.py).
"""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta

import pytest
from django.db.models.functions import Now

from queue_app.models import Job, JobLog, MaintenanceLease
from queue_app.runtime.maintenance import ELECTION_SECONDS, LEADER_LEASE_SECONDS
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import Events, child_env, kill_group, manage, ready_ids, relay_all, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

# Retries fall due within about a second.
FAST_RETRIES = {"JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS": "0.5", "JOBQUEUE_RETRY_BACKOFF_MAX_SECONDS": "1"}


def start_worker(processes, name: str, **env: str) -> tuple[subprocess.Popen, Events]:
    """``runworker --name <name>`` (one process, worker id ``<name>/0``), its log at debug."""
    process = manage(
        "runworker",
        "--name",
        name,
        env=child_env(LOG_LEVEL="DEBUG", **env),
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(process)
    return process, Events(process)


def leader(queue: str = "default") -> str:
    """The holder of the queue's unexpired maintenance lease ("" for none)."""
    row = MaintenanceLease.objects.filter(queue=queue, expires_at__gt=Now()).values_list("holder", flat=True)
    return next(iter(row), "")


def completed(jobs) -> bool:
    return Job.objects.filter(id__in=[job.id for job in jobs], status="completed").count() == len(jobs)


def failing_once(count: int) -> list[Job]:
    """Jobs whose first attempt fails: each comes back through the retry set."""
    return enqueue_jobs([JobRequest(type="probe.run", payload={"fail_first": 1}) for _ in range(count)])


def test_one_of_three_workers_leads_and_a_killed_leader_is_replaced_within_seconds(processes):
    relay = manage("runrelay", env=child_env(), stderr=subprocess.DEVNULL)
    processes.append(relay)
    workers = {name: start_worker(processes, name, **FAST_RETRIES) for name in ("w1", "w2", "w3")}
    wait_until(
        lambda: all(events.named("worker_started") for _, events in workers.values()),
        message="three workers",
    )
    first = wait_until(leader, message="a maintenance leader")
    jobs = failing_once(6)
    wait_until(lambda: completed(jobs), timeout=60, message="the retried jobs to complete")
    assert set(Job.objects.filter(id__in=[job.id for job in jobs]).values_list("attempts", flat=True)) == {2}

    def events(name: str, *names: str) -> list[dict]:
        return [event for name_ in names for event in workers[name][1].named(name_)]

    # One election in all, and every promotion by the leader alone.
    elected = [
        (name, event["holder"]) for name in workers for event in events(name, "maintenance_leader_elected")
    ]
    assert elected == [(first.removesuffix("/0"), first)]
    promotions = {name: events(name, "retry_promoted") for name in workers}
    assert promotions[first.removesuffix("/0")]
    assert all(not found for name, found in promotions.items() if name != first.removesuffix("/0"))
    assert leader() == first

    killed_at = time.monotonic()
    kill_group(workers.pop(first.removesuffix("/0"))[0])
    second = wait_until(lambda: leader() not in ("", first) and leader(), timeout=30, message="a new leader")
    took = time.monotonic() - killed_at
    # The dead leader's lease runs out, and a candidate's next try takes it (slack for a busy machine).
    assert took < LEADER_LEASE_SECONDS + ELECTION_SECONDS + 3, took
    more = failing_once(4)
    wait_until(lambda: completed(more), timeout=60, message="retries after the leader died")
    assert events(second.removesuffix("/0"), "retry_promoted")


def test_a_dead_workers_job_is_rescued_seconds_after_its_lease_ends_without_a_reconciler(
    processes, redis_client
):
    """The leader is busy with a long job of its own: its heartbeat thread rescues the
    job of a worker killed mid-run, and the relay and the promotion bring it back."""
    settings = {
        "JOBQUEUE_LEASE_SECONDS": "2",
        "JOBQUEUE_HEARTBEAT_SECONDS": "0.5",
        "JOBQUEUE_LEASE_RESCUE_SECONDS": "1",
        **FAST_RETRIES,
    }
    _, leading = start_worker(processes, "lead", **settings)
    wait_until(lambda: leader() == "lead/0", message="the first worker to lead")
    blocker = enqueue_job("probe.run", {"sleep": 60})
    wait_until(lambda: Job.objects.filter(id=blocker.id, worker_id="lead/0").exists(), message="its long job")
    doomed, _ = start_worker(processes, "doomed", **settings)
    victim = enqueue_job("probe.run", {"sleep": 60})
    wait_until(lambda: Job.objects.filter(id=victim.id, worker_id="doomed/0").exists(), message="the victim")

    kill_group(doomed)
    expiry = Job.objects.get(id=victim.id).lease_expires_at  # nobody extends it any more
    wait_until(lambda: Job.objects.get(id=victim.id).status != "processing", timeout=20, message="a rescue")

    rescued = Job.objects.get(id=victim.id)
    assert rescued.status == "queued" and rescued.attempts == 1
    log = JobLog.objects.get(job_id=victim.id, event="lease_expired_requeued")
    # Within a rescue interval (1 s) of the expiry, with slack for a loaded machine.
    assert log.created_at - expiry < timedelta(seconds=3), log.created_at - expiry
    assert leading.named("leases_rescued")
    # Its intent went out through the outbox; once due, the leader makes it ready.
    relay_all()
    wait_until(lambda: str(victim.id) in ready_ids(redis_client), timeout=20, message="the rescued job ready")
    assert Job.objects.get(id=blocker.id).status == "processing"

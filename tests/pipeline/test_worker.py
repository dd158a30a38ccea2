"""The worker, in-process: claim, run, complete, retry, fail, time limits, fencing."""

import random
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from structlog.testing import capture_logs

from queue_app import broker, services
from queue_app.engine import execution
from queue_app.engine.execution import Completion
from queue_app.exceptions import LeaseLost
from queue_app.models import Job, JobLog
from queue_app.runtime.worker import Worker
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import claim_jobs, ready_ids, relay_all, run_worker
from tests.probe.jobs import RUN_ORDER
from tests.probe.models import Effect, Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def events(job) -> list[str]:
    return list(JobLog.objects.filter(job_id=job.id).order_by("id").values_list("event", flat=True))


def test_echo_job_completes_with_its_result_and_trail():
    job = enqueue_job("demo.echo", {"hello": "world"})
    run_worker()
    job.refresh_from_db()
    assert job.status == "completed" and job.result == {"hello": "world"}
    assert job.attempts == 1 and job.completed_at >= job.started_at and job.worker_id == ""
    assert events(job) == ["enqueued", "claimed", "completed"]


def test_a_worker_woken_after_its_stop_puts_the_popped_ids_back_unclaimed():
    # The pop goes out with the wait (one queue): a stop that came meanwhile must not claim.
    job = enqueue_job("demo.echo", {})
    client = broker.get_client()
    assert ready_ids(client) == [str(job.id)]
    worker = Worker(worker_id="w-stopped", queues=["default"])
    worker.producer.refresh_controls(now=True)
    worker.stopping = True
    assert worker.producer.wait_for_work(client, 1, lambda: worker.stopping) == {}
    assert ready_ids(client) == [str(job.id)]
    assert client.zcard(broker.inflight_key("default")) == 0
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 0
    worker.stopping = False
    assert worker.producer.wait_for_work(client, 1, lambda: worker.stopping) == {"default": [str(job.id)]}


def test_failing_handler_ends_failed_after_exactly_max_attempts_with_backoff():
    job = enqueue_job("probe.fail")  # max_attempts=3, backoff base 0.2 s
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 3
    assert "RuntimeError: probe failure" in job.last_error
    assert Execution.objects.filter(job_id=job.id).count() == 3
    assert events(job) == [
        "enqueued",
        "claimed",
        "retry_scheduled",
        "claimed",
        "retry_scheduled",
        "claimed",
        "failed",
    ]
    retries = JobLog.objects.filter(job_id=job.id, event="retry_scheduled").order_by("id")
    claims = list(JobLog.objects.filter(job_id=job.id, event="claimed").order_by("id"))
    for retry, next_claim in zip(retries, claims[1:], strict=True):
        # Backoff: the next attempt starts no earlier than the scheduled retry time (full
        # jitter may draw a delay near 0, so that time may precede the log row itself).
        assert next_claim.created_at >= retry.created_at
        assert next_claim.created_at.isoformat() >= retry.extra["next_retry_at"]


def test_cpu_bound_handler_is_stopped_at_its_time_limit():
    job = enqueue_job("probe.spin")  # time_limit=1, max_attempts=2
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 2
    assert "JobTimeLimitExceeded" in job.last_error
    assert events(job).count("retry_scheduled") == 1


def test_a_flaky_job_retries_then_completes():
    job = enqueue_job("probe.run", {"fail_first": 1}, max_attempts=3)
    run_worker()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2
    assert Execution.objects.filter(job_id=job.id).count() == 2


def test_unknown_type_in_the_database_fails_without_retry():
    job = enqueue_job("demo.echo")
    Job.objects.filter(id=job.id).update(type="no.such.type")
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 1
    assert job.last_error_class == "queue_app.exceptions.UnknownJobType"


def test_two_workers_claiming_one_duplicated_id_get_exactly_one_claim():
    job = enqueue_job("demo.echo")
    barrier = threading.Barrier(2)
    claims = []

    def claim(worker_id):
        barrier.wait()
        claims.append((worker_id, claim_jobs([str(job.id)], worker_id=worker_id)))
        connection.close()

    with capture_logs() as logs:
        threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    winners = [worker for worker, claimed in claims if claimed]
    assert len(winners) == 1
    assert [entry["event"] for entry in logs if entry["event"].startswith("job_")] == [
        "job_status_not_queued"
    ]
    job.refresh_from_db()
    assert job.attempts == 1 and job.worker_id == winners[0]


def test_popped_id_of_a_missing_job_is_logged_and_dropped():
    with capture_logs() as logs:
        assert claim_jobs(["00000000-0000-0000-0000-000000000000", "not-a-uuid"], worker_id="w") == []
    assert [entry["event"] for entry in logs].count("job_not_found_in_db") == 2


def test_a_completion_after_a_cancel_request_confirms_the_cancel_and_writes_no_result():
    job = enqueue_job("demo.echo", {"v": 1})
    relay_all()
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    assert services.cancel_job(job.id).status == "cancelling"
    assert execution.complete_jobs([Completion(claimed.id, claimed.fence, {"v": 1})]) == set()
    job.refresh_from_db()
    assert job.status == "cancelled" and job.result is None
    assert events(job)[-2:] == ["cancel_requested", "cancel_confirmed"]


def test_a_stale_holder_is_fenced_off_after_a_hand_back_and_a_new_claim():
    """A hand-back takes the attempt back (attempts - 1) but never lowers the fence, so
    the next holder's token differs from every earlier one's (issue: the token went back)."""
    job = enqueue_job("demo.echo")
    [stale] = claim_jobs([str(job.id)], worker_id="old")
    assert execution.hand_back_job(stale.id, stale.fence, worker_id="old", reason="stopping")
    [fresh] = claim_jobs([str(job.id)], worker_id="new")
    assert fresh.attempt == stale.attempt == 1  # the hand-back charged nothing
    assert fresh.fence == stale.fence + 1
    # The stale holder (same attempt number, old token) can neither extend, fail nor complete.
    assert set(execution.extend_leases([(stale.id, stale.fence)], worker_id="new")) == set()
    assert execution.fail_job(stale.id, stale.fence, "stale failure") is None
    assert execution.complete_jobs([Completion(stale.id, stale.fence, "stale")]) == set()
    assert execution.hand_back_job(stale.id, stale.fence, worker_id="new", reason="stale") is False
    job.refresh_from_db()
    assert job.status == "processing" and job.worker_id == "new" and job.last_error == ""
    assert events(job)[-2:] == ["failure_fenced", "completion_fenced"]
    # The new holder still holds it.
    assert set(execution.extend_leases([(fresh.id, fresh.fence)], worker_id="new")) == {fresh.id}
    assert execution.complete_jobs([Completion(fresh.id, fresh.fence, "fresh")]) == {fresh.id}
    job.refresh_from_db()
    assert job.status == "completed" and job.result == "fresh" and job.attempts == 1


def _run_in_main_thread(worker: Worker, claimed) -> None:
    [attempt] = worker.holdings.claimed([claimed])
    worker.holdings.next_unstarted()
    worker.executor.run(attempt, worker._main)


def test_atomic_handler_effect_rolls_back_when_fenced():
    """The attempt lost its lease to a rescue while it ran: its completion and the
    handler's own writes roll back, and one row says so."""
    job = enqueue_job("probe.effect", {"sleep": 0})
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    execution.rescue_expired_leases()
    _run_in_main_thread(Worker(worker_id="w", queues=["default"]), claimed)
    assert not Effect.objects.exists()
    job.refresh_from_db()
    assert job.status == "queued" and events(job)[-1] == "completion_fenced"
    assert events(job).count("completion_fenced") == 1


def test_an_attempt_that_ends_while_its_job_is_cancelling_confirms_the_cancel():
    """Whatever the handler did, a job asked to cancel ends cancelled once its attempt has
    stopped: an atomic handler's writes roll back, no fenced row, the cancel confirmed."""
    job = enqueue_job("probe.effect", {"sleep": 0})
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    assert services.cancel_job(job.id).status == "cancelling"
    _run_in_main_thread(Worker(worker_id="w", queues=["default"]), claimed)
    assert not Effect.objects.exists()
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert events(job)[-2:] == ["cancel_requested", "cancel_confirmed"]


def test_atomic_handler_effect_commits_with_completion():
    job = enqueue_job("probe.effect")
    run_worker()
    job.refresh_from_db()
    assert job.status == "completed"
    assert list(Effect.objects.values_list("job_id", "attempt")) == [(job.id, 1)]


def test_retry_and_cancel_conflicts():
    job = enqueue_job("demo.echo")
    with pytest.raises(services.TransitionNotAllowed):
        services.retry_job(job.id)
    run_worker()
    with pytest.raises(services.TransitionNotAllowed):
        services.cancel_job(job.id)
    failed = enqueue_job("demo.fail", max_attempts=1)
    run_worker()
    retried = services.retry_job(failed.id)
    assert retried.status == "queued" and retried.max_attempts == 2
    assert events(retried)[-1] == "retried"


def test_ten_thousand_mixed_jobs_drain_by_tier_then_fifo(queue_config):
    queue_config(WORKER_BATCH_SIZE=100)
    rng = random.Random(7)
    requests = [
        JobRequest(type="probe.order", priority=rng.choice(["high", "medium", "low"])) for _ in range(10_000)
    ]
    jobs = []
    for start in range(0, len(requests), 1000):
        jobs += enqueue_jobs(requests[start : start + 1000])
    tier = {"high": 0, "medium": 1, "low": 2}
    expected = [
        str(job.id) for _, job in sorted(enumerate(jobs), key=lambda item: (tier[item[1].priority], item[0]))
    ]
    RUN_ORDER.clear()
    run_worker()
    assert RUN_ORDER == expected
    assert Job.objects.filter(status="completed").count() == 10_000


def _in_background(target, stop: threading.Event, interval: float = 0.1) -> threading.Thread:
    def loop():
        try:
            while not stop.wait(interval):
                target()
        finally:
            connection.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_heartbeat_keeps_a_long_job_from_being_rescued(queue_config):
    # The job outlives two leases; a 3 s lease leaves a loaded machine room for late heartbeats.
    queue_config(LEASE_SECONDS=3, HEARTBEAT_SECONDS=0.3)
    job = enqueue_job("probe.run", {"sleep": 7})
    stop = threading.Event()
    rescuer = _in_background(execution.rescue_expired_leases, stop)
    try:
        run_worker()
    finally:
        stop.set()
        rescuer.join()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1
    assert "lease_expired_requeued" not in events(job)


def test_cancelling_a_running_job_stops_its_handler(queue_config):
    queue_config(HEARTBEAT_SECONDS=0.2)
    job = enqueue_job("probe.run", {"sleep": 30})
    stop = threading.Event()

    def cancel_once_running():
        # Its handler running (its Execution row), not only claimed.
        if Execution.objects.filter(job_id=job.id).exists():
            services.cancel_job(job.id)
            stop.set()

    canceller = _in_background(cancel_once_running, stop)
    started = time.monotonic()
    run_worker()
    canceller.join()
    assert time.monotonic() - started < 15  # not the handler's 30 s
    job.refresh_from_db()
    assert job.status == "cancelled" and job.result is None
    assert Execution.objects.get(job_id=job.id).finished_at is None
    assert "completed" not in events(job)


def test_a_heartbeat_racing_a_completion_writes_no_fenced_row_for_it():
    """Issue 30 item 4: the heartbeat took its snapshot of held attempts, the main thread's
    completion committed, and the extension found the job gone. The completion's attempt was
    marked as being settled before its write, so the heartbeat says nothing of it; an attempt
    really lost (not being settled) is recorded once."""
    from queue_app.runtime.heartbeat import Heartbeat

    done, lost = enqueue_job("demo.echo"), enqueue_job("demo.echo")
    claimed = claim_jobs([str(done.id), str(lost.id)], worker_id="w")
    worker = Worker(worker_id="w", queues=["default"])
    attempts = {attempt.job.id: attempt for attempt in worker.holdings.claimed(claimed)}
    snapshot = worker.holdings.leases()
    attempts[str(done.id)].settling = True  # the completion's write is under way
    execution.complete_jobs([Completion(str(done.id), attempts[str(done.id)].job.fence, None)])
    Job.objects.filter(id=lost.id).update(fence=99)  # another attempt holds it now
    statuses = execution.extend_leases(snapshot, worker_id="w")
    Heartbeat(worker)._tell_attempts(snapshot, statuses)
    assert not JobLog.objects.filter(job_id=done.id, event="heartbeat_fenced").exists()
    assert JobLog.objects.filter(job_id=lost.id, event="heartbeat_fenced").count() == 1
    assert attempts[str(lost.id)].stop is LeaseLost and attempts[str(done.id)].stop is None

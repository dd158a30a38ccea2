"""Snooze: a handler raises ``Snooze(seconds)`` and its job waits, its attempt not charged.

Checked against the hand-back, the other transition that takes its attempt back
(states.TRANSITION_TABLE 'hand_back'), and Oban's snooze, which this follows
(a job returning ``{:snooze, seconds}`` is scheduled again that many seconds later).
"""

import threading
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.tasks.signals import task_finished, task_started
from django.utils import timezone

from queue_app import services
from queue_app.engine import execution
from queue_app.exceptions import Snooze
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.runtime.worker import Worker
from queue_app.services import enqueue_job
from tests.helpers import claim_jobs, close_sync_to_async_connections, relay_all, run_worker, wait_until
from tests.probe.jobs import snoozing_task
from tests.probe.models import Effect, Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

# PostgreSQL keeps microseconds.
MICROSECOND = 1e-6


@pytest.fixture(autouse=True)
def _close_the_coroutines_connection():
    """The slot coroutine's sync_to_async calls left a connection on asgiref's thread."""
    yield
    close_sync_to_async_connections()


def events(job) -> list[str]:
    return list(JobLog.objects.filter(job_id=job.id).order_by("id").values_list("event", flat=True))


@pytest.mark.parametrize(
    ("job_type", "slots"),
    [("probe.snooze", None), ("probe.snooze_io", 2), ("probe.snooze_async", 2)],
    ids=["main thread", "slot thread", "slot coroutine"],
)
def test_a_job_snoozes_twice_then_completes_on_its_first_attempt(job_type, slots):
    job = enqueue_job(job_type, {"times": 2, "seconds": 0.2})
    run_worker(slots=slots)
    job.refresh_from_db()
    assert job.status == "completed" and job.result == {"runs": 3, "attempt": 1}
    assert job.attempts == 1 and job.snoozes == 2 and job.max_attempts == 1
    assert Execution.objects.filter(job_id=job.id).count() == 3
    assert events(job) == ["enqueued", "claimed", "snoozed", "claimed", "snoozed", "claimed", "completed"]
    snoozed = JobLog.objects.filter(job_id=job.id, event="snoozed").order_by("id")
    assert [(row.extra["seconds"], row.extra["snoozes"], row.extra["attempt"]) for row in snoozed] == [
        (0.2, 1, 1),
        (0.2, 2, 1),
    ]
    assert [row.level for row in snoozed] == ["info", "info"]
    assert "snoozed for 0.2 s" in snoozed[0].message
    # Each snooze went to Redis's retry set through an outbox row due at its time, and the
    # next run started no earlier.
    schedules = OutboxMessage.objects.filter(job_id=job.id, action="schedule").order_by("id")
    claims = JobLog.objects.filter(job_id=job.id, event="claimed").order_by("id")[1:]
    for row, schedule, claim in zip(snoozed, schedules, claims, strict=True):
        due = datetime.fromisoformat(row.extra["next_retry_at"])
        assert (due - row.created_at).total_seconds() <= 0.2 + MICROSECOND
        assert schedule.score == pytest.approx(due.timestamp(), abs=MICROSECOND)
        assert claim.created_at >= due


def test_the_snooze_puts_the_job_back_queued_until_then_with_no_attempt_charged():
    job = enqueue_job("demo.echo")
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    before = timezone.now()
    assert execution.snooze_job(claimed.id, claimed.fence, 60) == "queued"
    job.refresh_from_db()
    assert job.status == "queued" and job.attempts == 0 and job.snoozes == 1
    assert job.fence == claimed.fence  # never lowered: the next claim's token is new
    assert job.worker_id == "" and job.lease_expires_at is None
    assert 59 <= (job.next_retry_at - before).total_seconds() <= 61
    assert job.enqueued_at == job.next_retry_at
    [log] = JobLog.objects.filter(job_id=job.id, event="snoozed")
    assert log.extra == {
        "seconds": 60,
        "snoozes": 1,
        "attempt": 1,
        "fence": claimed.fence,
        "next_retry_at": job.next_retry_at.isoformat(),
    }
    # Not claimable before its time.
    assert claim_jobs([str(job.id)], worker_id="w") == []


def test_a_snooze_past_max_snoozes_fails_the_job_naming_the_setting(queue_config):
    queue_config(MAX_SNOOZES=3)
    job = enqueue_job("probe.snooze", {"times": 10, "seconds": 0})
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.snoozes == 3 and job.attempts == 1
    assert job.last_error.startswith("SnoozeLimitExceeded: the job has snoozed 3 times")
    assert "JOBQUEUE['MAX_SNOOZES']" in job.last_error
    assert job.last_error_class == "queue_app.exceptions.SnoozeLimitExceeded"
    assert Execution.objects.filter(job_id=job.id).count() == 4
    assert events(job)[-3:] == ["snoozed", "claimed", "failed"]
    assert events(job).count("snoozed") == 3


def test_a_stale_attempts_snooze_is_fenced_and_writes_nothing_but_its_row():
    job = enqueue_job("demo.echo")
    [stale] = claim_jobs([str(job.id)], worker_id="old")
    assert execution.hand_back_job(stale.id, stale.fence, worker_id="old", reason="stopping")
    [fresh] = claim_jobs([str(job.id)], worker_id="new")
    assert execution.snooze_job(stale.id, stale.fence, 5) is None
    job.refresh_from_db()
    assert job.status == "processing" and job.fence == fresh.fence and job.snoozes == 0
    assert events(job)[-1] == "snooze_fenced"
    assert not OutboxMessage.objects.filter(job_id=job.id, action="schedule").exists()


def test_a_snooze_of_a_job_asked_to_cancel_cancels_it():
    """The cancel committed before the snooze's write: the attempt has stopped, so the
    cancel is confirmed (settle_rejected_attempts), as for any outcome the fence turns away."""
    job = enqueue_job("probe.snooze", {"times": 5, "seconds": 60})
    relay_all()
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    assert services.cancel_job(job.id).status == "cancelling"
    worker = Worker(worker_id="w", queues=["default"])
    [attempt] = worker.holdings.claimed([claimed])
    worker.holdings.next_unstarted()
    worker.executor.run(attempt, worker._main)  # the handler snoozes; it never heard the cancel
    job.refresh_from_db()
    assert job.status == "cancelled" and job.snoozes == 0 and job.next_retry_at is None
    assert events(job)[-2:] == ["cancel_requested", "cancel_confirmed"]


def test_a_handler_answering_the_cancel_with_a_snooze_is_cancelled(queue_config):
    """The cancel reaches the running handler (CancelRequested), which snoozes instead: the
    attempt was asked to stop, so whatever it ends with, the cancel wins."""
    queue_config(HEARTBEAT_SECONDS=0.2)
    job = enqueue_job("probe.snooze_on_cancel")

    def cancel_once_running():
        try:
            wait_until(lambda: Execution.objects.filter(job_id=job.id).exists())
            services.cancel_job(job.id)
        finally:
            connection.close()

    canceller = threading.Thread(target=cancel_once_running, daemon=True)
    canceller.start()
    run_worker()
    canceller.join()
    job.refresh_from_db()
    assert job.status == "cancelled" and job.snoozes == 0
    assert "snoozed" not in events(job)
    assert events(job)[-2:] == ["cancel_requested", "cancel_confirmed"]


def test_an_atomic_handlers_writes_roll_back_with_its_snooze():
    job = enqueue_job("probe.snooze_atomic", {"seconds": 60})
    relay_all()
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    worker = Worker(worker_id="w", queues=["default"])
    [attempt] = worker.holdings.claimed([claimed])
    worker.holdings.next_unstarted()
    worker.executor.run(attempt, worker._main)
    job.refresh_from_db()
    assert job.status == "queued" and job.snoozes == 1 and job.attempts == 0
    assert not Effect.objects.exists()


def test_a_django_task_snoozes_uncounted():
    """A snooze is no outcome: task_started is sent for each run, task_finished once, at the
    end (Django's signals, django/tasks/signals.py, announce a result's start and finish)."""
    started, finished = [], []

    def on_started(sender, task_result, **kwargs):
        started.append(task_result.status)

    def on_finished(sender, task_result, **kwargs):
        finished.append(task_result.status)

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        result = snoozing_task.enqueue(2)
        run_worker()
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    result.refresh()
    assert result.status == "SUCCESSFUL" and result.return_value == {"runs": 3, "attempt": 1}
    assert len(started) == 3 and finished == ["SUCCESSFUL"]
    job = Job.objects.get(id=result.id)
    assert job.attempts == 1 and job.snoozes == 2
    # One attempt, one worker: the snoozed runs' claims are not attempts.
    assert result.worker_ids == ["test-worker"]


def test_a_snoozed_claim_is_not_one_of_a_task_results_workers():
    """worker_ids has one entry per attempt charged (Django's TaskResult.worker_ids): a
    failed attempt on w1, a snooze on w2, the completion on w3 were two attempts."""
    result = snoozing_task.enqueue(0)
    Job.objects.filter(id=result.id).update(max_attempts=3)

    def claim(worker):
        Job.objects.filter(id=result.id).update(next_retry_at=None)  # due now, whatever it waits for
        [claimed] = claim_jobs([result.id], worker_id=worker)
        return claimed

    first = claim("w1")
    assert execution.fail_job(first.id, first.fence, "RuntimeError: once") == "queued"
    second = claim("w2")
    assert execution.snooze_job(second.id, second.fence, 60) == "queued"
    third = claim("w3")
    execution.complete_jobs([execution.Completion(third.id, third.fence, {"runs": 1})])

    assert snoozing_task.get_result(result.id).worker_ids == ["w1", "w3"]


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), 10 * 365 * 24 * 3600 + 1, "5", True])
def test_a_bad_snooze_is_a_value_error_where_the_handler_makes_it(seconds):
    with pytest.raises(ValueError, match="Snooze: seconds must be"):
        Snooze(seconds)


def test_snooze_takes_seconds_or_a_timedelta():
    assert Snooze(timedelta(minutes=2)).seconds == 120.0
    assert Snooze(0).seconds == 0.0
    assert services.Snooze is Snooze


def test_job_rows_read_back_with_their_snooze_count():
    assert Job.objects.create(type="demo.echo", max_attempts=1).snoozes == 0

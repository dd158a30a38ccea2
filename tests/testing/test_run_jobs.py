"""run_jobs and perform_job: queued jobs run in the test's process through the real claim,
executor and settling, against PostgreSQL, inside the test's transaction.

The references: Oban.Testing's ``drain_queue`` (runs a queue's jobs in the test process,
``with_scheduled`` runs scheduled ones too, returns counts by outcome) and
``perform_job``; Celery's eager mode (``task_always_eager``).
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.tasks import TaskResultStatus
from django.test import TestCase
from django.utils import timezone

import tests.testing.jobs  # noqa: F401 - registers the handlers these tests run
from queue_app.exceptions import JobNotFound, TransitionNotAllowed, UnknownQueue
from queue_app.models import Job, JobLog
from queue_app.services import cancel_job, enqueue_job, pause_queue, set_queue_limits
from queue_app.testing import RunSummary, assert_enqueued, assert_not_enqueued, perform_job, run_jobs
from tests.probe import jobs as probe
from tests.probe.models import Effect, Execution

pytestmark = pytest.mark.django_db


def events(job) -> list[str]:
    return list(JobLog.objects.filter(job_id=job.id).order_by("id").values_list("event", flat=True))


def test_a_job_runs_to_completion_through_the_claim_and_its_trail_says_so():
    job = enqueue_job("demo.echo", {"invoice": 42})

    assert run_jobs() == RunSummary(completed=1)

    job.refresh_from_db()
    assert (job.status, job.result, job.attempts, job.fence) == ("completed", {"invoice": 42}, 1, 1)
    assert job.started_at is not None and job.completed_at is not None and job.worker_id == ""
    assert events(job) == ["enqueued", "claimed", "completed"]
    claimed = JobLog.objects.get(job_id=job.id, event="claimed")
    assert claimed.message == "claimed by inline"


def test_a_failing_job_is_retried_after_its_backoff_then_fails_when_no_attempt_is_left():
    job = enqueue_job("probe.fail")  # raises RuntimeError("probe failure"), 3 attempts, backoff 0.2-1 s

    assert run_jobs() == RunSummary(retried=1)  # the retry waits out its backoff
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("queued", 1) and job.next_retry_at is not None
    assert run_jobs() == RunSummary()  # not due yet: nothing runs

    assert run_jobs(with_scheduled=True) == RunSummary(retried=1, failed=1)

    job.refresh_from_db()
    assert (job.status, job.attempts, job.next_retry_at) == ("failed", 3, None)
    assert job.last_error == "RuntimeError: probe failure"
    assert job.last_error_class == "builtins.RuntimeError"
    assert job.last_error_traceback.rstrip().endswith("RuntimeError: probe failure")
    assert Execution.objects.filter(job_id=job.id).count() == 3
    assert events(job) == ["enqueued"] + ["claimed", "retry_scheduled"] * 2 + ["claimed", "failed"]
    delays = [
        (timezone.datetime.fromisoformat(row.extra["next_retry_at"]) - row.created_at).total_seconds()
        for row in JobLog.objects.filter(job_id=job.id, event="retry_scheduled")
    ]
    # The handler's backoff, full jitter: up to 0.2 s then 0.4 s, less the moments between the
    # transaction's start (next_retry_at) and the log row's insert, so a draw near 0 may read
    # a little below it.
    assert all(-0.5 < delay <= nominal for delay, nominal in zip(delays, [0.2, 0.4], strict=True))


def test_an_error_listed_in_give_up_on_fails_at_once():
    job = enqueue_job("probe.picky", {"raise": "value"})  # 3 attempts, gives up on ValueError

    assert run_jobs(with_scheduled=True) == RunSummary(failed=1)

    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error) == ("failed", 1, "ValueError: probe value error")


def test_an_atomic_handlers_writes_commit_with_its_completion_and_go_with_its_failure():
    done = enqueue_job("probe.effect")
    failed = enqueue_job("testing.atomic_then_fail")

    assert run_jobs() == RunSummary(completed=1, failed=1)

    assert list(Effect.objects.values_list("job_id", "attempt")) == [(done.id, 1)]
    assert Job.objects.get(id=done.id).result == {"ok": True}
    assert Job.objects.get(id=failed.id).last_error == "RuntimeError: failed after writing"


def test_a_django_task_runs_through_the_internal_job_type():
    result = probe.add.enqueue(2, 3)
    context = probe.whoami.enqueue()

    assert run_jobs() == RunSummary(completed=2)

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == {"sum": 5}
    assert result.worker_ids == ["inline"]
    context.refresh()
    assert context.return_value == {"id": context.id}


def test_an_async_handler_runs_and_its_queries_join_the_tests_transaction():
    job = enqueue_job("probe.async_wait", {"sleep": 0})

    assert run_jobs() == RunSummary(completed=1)

    # Written through sync_to_async: on this connection, inside the test's transaction.
    (execution,) = Execution.objects.filter(job_id=job.id)
    assert execution.attempt == 1
    assert Job.objects.get(id=job.id).status == "completed"


def test_jobs_run_in_priority_order_and_jobs_they_enqueue_run_too():
    probe.RUN_ORDER.clear()
    low = enqueue_job("probe.order", priority="low")
    medium = enqueue_job("probe.order")
    high = enqueue_job("probe.order", priority="high")
    enqueue_job("testing.countdown", {"left": 3}, priority=-50)

    assert run_jobs() == RunSummary(completed=7)

    assert probe.RUN_ORDER == [str(high.id), str(medium.id), str(low.id)]
    results = Job.objects.filter(type="testing.countdown").order_by("id").values_list("result", flat=True)
    assert list(results) == [{"left": 3}, {"left": 2}, {"left": 1}, {"left": 0}]


def test_max_jobs_bounds_the_run():
    enqueue_job("testing.countdown", {"left": 10})

    assert run_jobs(max_jobs=4) == RunSummary(completed=4)
    assert Job.objects.filter(status="queued").count() == 1


def test_a_scheduled_job_runs_only_with_scheduled():
    later = enqueue_job("demo.echo", {"n": 1}, run_at=timezone.now() + timedelta(hours=1))

    assert run_jobs() == RunSummary()
    assert run_jobs(with_scheduled=True) == RunSummary(completed=1)
    assert Job.objects.get(id=later.id).status == "completed"


def test_only_the_named_queues_run(queue_config):
    queue_config(QUEUES="default,mail,reports")
    mail = enqueue_job("demo.echo", queue="mail")
    report = enqueue_job("demo.echo", queue="reports")
    default = enqueue_job("demo.echo")

    assert run_jobs("mail") == RunSummary(completed=1)
    assert Job.objects.get(id=mail.id).status == "completed"
    assert run_jobs(["reports", "default"]) == RunSummary(completed=2)
    assert {Job.objects.get(id=job.id).status for job in (report, default)} == {"completed"}
    with pytest.raises(UnknownQueue, match="'mails' is not one of default, mail, reports"):
        run_jobs("mails")


def test_a_paused_or_full_queue_keeps_its_jobs_queued(queue_config):
    queue_config(QUEUES="default,paused")
    held = enqueue_job("demo.echo", queue="paused")
    pause_queue("paused")
    runs = enqueue_job("demo.echo")

    assert run_jobs() == RunSummary(completed=1)
    assert Job.objects.get(id=runs.id).status == "completed"
    assert Job.objects.get(id=held.id).status == "queued"
    with pytest.raises(TransitionNotAllowed, match="held back by the controls of queue 'paused'"):
        perform_job(held)


def test_a_queue_limit_is_honoured_and_its_jobs_still_run_one_by_one(queue_config):
    queue_config(QUEUES="default,limited")
    set_queue_limits("limited", concurrency_limit=1)
    enqueue_job("demo.echo", {"n": 1}, queue="limited")
    enqueue_job("demo.echo", {"n": 2}, queue="limited")

    assert run_jobs("limited") == RunSummary(completed=2)


def test_a_job_cancelled_while_it_runs_is_cancelled_once_its_handler_returns():
    job = enqueue_job("testing.cancel_self")

    assert run_jobs() == RunSummary(cancelled=1)

    job.refresh_from_db()
    assert (job.status, job.result) == ("cancelled", None)
    assert events(job) == ["enqueued", "claimed", "cancel_requested", "cancel_confirmed"]


def test_a_handlers_failed_statement_leaves_the_tests_transaction_usable():
    """In a worker the handler runs in autocommit, where a refused statement undoes only
    itself; here its savepoint goes back, its earlier writes with it, and the test goes on."""
    failing = enqueue_job("testing.failed_statement")  # 2 attempts
    caught = enqueue_job("testing.caught_failed_statement")

    assert run_jobs(with_scheduled=True) == RunSummary(completed=1, retried=1, failed=1)

    failing.refresh_from_db()
    assert (failing.status, failing.attempts) == ("failed", 2)
    assert failing.last_error.startswith("DataError: division by zero")
    assert not Execution.objects.filter(job_id=failing.id).exists()
    assert Job.objects.get(id=caught.id).result == {"caught": True}
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_perform_job_runs_one_job_scheduled_or_not_and_returns_it():
    later = enqueue_job("demo.echo", {"n": 1}, run_at=timezone.now() + timedelta(hours=1))
    other = enqueue_job("demo.echo", {"n": 2})

    done = perform_job(later)

    assert (done.id, done.status, done.result) == (later.id, "completed", {"n": 1})
    assert Job.objects.get(id=other.id).status == "queued"
    assert perform_job(str(other.id)).status == "completed"


def test_perform_job_refuses_a_job_that_is_not_queued_or_does_not_exist():
    job = enqueue_job("demo.echo")
    cancel_job(job.id)

    with pytest.raises(TransitionNotAllowed, match=f"job {job.id} is cancelled: only a queued job can run"):
        perform_job(job.id)
    with pytest.raises(JobNotFound):
        perform_job("00000000-0000-0000-0000-000000000000")
    with pytest.raises(JobNotFound):
        perform_job("nope")
    assert events(job) == ["enqueued", "cancelled"]


class RunJobsInsideADjangoTestCase(TestCase):
    """Django's own TestCase (each test in a transaction rolled back after it) as the pytest mark."""

    def test_enqueue_assert_and_run_an_atomic_handler(self):
        job = enqueue_job("probe.effect")
        assert_enqueued(type="probe.effect")

        self.assertEqual(run_jobs(), RunSummary(completed=1))

        assert_not_enqueued(type="probe.effect")
        self.assertEqual(Job.objects.get(id=job.id).status, "completed")
        self.assertEqual(list(Effect.objects.values_list("job_id", flat=True)), [job.id])

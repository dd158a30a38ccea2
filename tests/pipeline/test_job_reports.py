"""Progress and log lines from inside a job: ``current_job().progress()`` and ``.log()``.

Written to PostgreSQL, fenced by the attempt's token like every other write made for a
running attempt, and rate-limited per attempt (counted in statements, not in time).
"""

import math
import sys

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from queue_app.engine import execution
from queue_app.models import Job, JobLog
from queue_app.reports import CurrentJob
from queue_app.runtime.holdings import Attempt
from queue_app.runtime.worker import Worker
from queue_app.services import enqueue_job
from queue_app.states import NON_TRANSITION_EVENTS
from tests.helpers import PROJECT_ROOT, claim_jobs, close_sync_to_async_connections, relay_all, run_worker
from tests.probe.jobs import REPORTED, reporting_task, reporting_task_async

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@pytest.fixture(autouse=True)
def _fresh_reports():
    REPORTED.clear()
    yield
    close_sync_to_async_connections()


def lines(job, event="job_log") -> list[JobLog]:
    return list(JobLog.objects.filter(job_id=job.id, event=event).order_by("id"))


def statements(queries, text: str) -> int:
    return sum(text in query["sql"] for query in queries)


def run_in_main_thread(claimed) -> None:
    """Run one claimed attempt the way the worker's main thread does."""
    worker = Worker(worker_id="w", queues=["default"])
    [attempt] = worker.holdings.claimed([claimed])
    worker.holdings.next_unstarted()
    worker.executor.run(attempt, worker._main)


def test_progress_and_log_lines_are_written_to_the_job_and_its_trail():
    job = enqueue_job("probe.report", {"progress": 4, "lines": 3})
    run_worker()
    job.refresh_from_db()
    assert job.status == "completed"
    assert job.progress == 1.0 and job.progress_message == "step 4"
    assert job.started_at <= job.progress_at <= job.completed_at
    written = lines(job)
    assert [(row.message, row.level, row.extra) for row in written] == [
        ("line 0", "info", {"index": 0}),
        ("line 1", "info", {"index": 1}),
        ("line 2", "info", {"index": 2}),
    ]
    assert REPORTED == [{"job": str(job.id), "progress": {True}, "log": {True}}]


def test_ten_thousand_progress_calls_write_a_bounded_number_of_updates_and_the_last_lands():
    job = enqueue_job("probe.report", {"progress": 10_000})
    with CaptureQueriesContext(connection) as queries:
        run_worker()
    job.refresh_from_db()
    assert job.progress == 1.0 and job.progress_message == "step 10000"
    updates = statements(queries, "SET progress")
    # The first call, one per PROGRESS_MIN_INTERVAL_SECONDS (0.5) the loop lasted, the last kept.
    seconds = job.result["seconds"]
    assert 2 <= updates <= 2 + math.ceil(seconds / 0.5), (updates, seconds)


def test_with_a_long_interval_exactly_the_first_and_the_last_progress_are_written(queue_config):
    queue_config(PROGRESS_MIN_INTERVAL_SECONDS=600)
    job = enqueue_job("probe.report", {"progress": 10_000})
    with CaptureQueriesContext(connection) as queries:
        run_worker()
    assert statements(queries, "SET progress") == 2
    job.refresh_from_db()
    assert job.progress == 1.0 and job.progress_message == "step 10000"


def test_log_lines_past_the_cap_are_dropped_and_counted(queue_config):
    queue_config(JOB_LOG_LINES_PER_SECOND=5)
    job = enqueue_job("probe.report", {"lines": 10_000})
    with CaptureQueriesContext(connection) as queries:
        run_worker()
    job.refresh_from_db()
    kept, dropped = lines(job), lines(job, "job_log_dropped")
    seconds = job.result["seconds"]
    # At most five lines in each second the loop touched; every other line is counted.
    assert 5 <= len(kept) <= 5 * (math.ceil(seconds) + 1)
    assert len(kept) + sum(row.extra["dropped"] for row in dropped) == 10_000
    assert 1 <= len(dropped) <= math.ceil(seconds) + 1
    assert {(row.level, row.extra["lines_per_second"]) for row in dropped} == {("warning", 5)}
    assert dropped[0].message == f"{dropped[0].extra['dropped']} log lines dropped: more than 5 a second"
    # One INSERT per line kept (the count rides with the line after it, or the last write).
    assert statements(queries, "jsonb_array_elements") <= len(kept) + 1
    # Kept lines are the first ones of each second, in order.
    assert [row.message for row in kept[:5]] == [f"line {index}" for index in range(5)]


def test_a_stale_attempts_reports_are_refused_and_nothing_is_written():
    """The fence moved on (a hand-back and a later claim): the old attempt's progress and
    log lines return False and write nothing, as its completion does."""
    job = enqueue_job("probe.report", {"progress": 3, "lines": 3})
    relay_all()
    [stale] = claim_jobs([str(job.id)], worker_id="w")
    assert execution.hand_back_job(stale.id, stale.fence, worker_id="w", reason="stopping")
    [fresh] = claim_jobs([str(job.id)], worker_id="w")
    run_in_main_thread(stale)
    assert REPORTED == [{"job": str(job.id), "progress": {False}, "log": {False}}]
    job.refresh_from_db()
    assert job.progress is None and job.progress_at is None and lines(job) == []
    assert job.status == "processing" and job.fence == fresh.fence
    # The attempt that holds the job reports as usual.
    run_in_main_thread(fresh)
    job.refresh_from_db()
    assert job.status == "completed" and job.progress == 1.0 and len(lines(job)) == 3


def test_a_refused_report_stops_the_attempts_reports_without_another_statement():
    job = enqueue_job("demo.echo")
    [stale] = claim_jobs([str(job.id)], worker_id="w")
    execution.hand_back_job(stale.id, stale.fence, worker_id="w", reason="stopping")
    handle = CurrentJob(stale, Attempt(stale))
    assert handle.progress(0.5) is False
    with CaptureQueriesContext(connection) as queries:
        assert handle.progress(0.6) is False
        assert handle.log("later") is False
    assert len(queries) == 0


@pytest.mark.parametrize("fail", [False, True], ids=["completed", "failed"])
def test_an_atomic_handlers_reports_are_written_after_its_transaction(fail):
    """Inside the transaction nothing is written (a progress UPDATE would hold the job's row
    lock until the commit); with the completion, or after a rollback, everything lands."""
    job = enqueue_job("probe.report_atomic", {"progress": 3, "lines": 2, "fail": fail})
    run_worker()
    job.refresh_from_db()
    assert job.status == ("failed" if fail else "completed")
    assert job.progress == 1.0 and job.progress_message == "step 3"
    assert [row.message for row in lines(job)] == ["line 0", "line 1"]


def test_a_coroutine_reports_through_aprogress_and_alog():
    job = enqueue_job("probe.report_async")
    run_worker(slots=2)
    job.refresh_from_db()
    assert job.status == "completed", job.last_error
    assert job.progress == 1.0 and job.progress_message == "all"
    assert [(row.message, row.extra) for row in lines(job)] == [("from a coroutine", {"where": "slot"})]


def test_django_tasks_report_through_current_job():
    result = reporting_task.enqueue(3)
    run_worker()
    job = Job.objects.get(id=result.id)
    assert job.status == "completed"
    assert job.progress == 1.0 and job.progress_message == "done"
    assert [(row.message, row.extra) for row in lines(job)] == [
        (f"task line {index}", {"index": index}) for index in range(3)
    ]


def test_an_async_django_task_reports_through_current_job():
    result = reporting_task_async.enqueue()
    run_worker()
    job = Job.objects.get(id=result.id)
    assert job.status == "completed", job.last_error
    assert job.result == {"id": str(job.id)}
    assert job.progress == 0.5 and [row.message for row in lines(job)] == ["async task line"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1.5,), r"the fraction \(1.5\) must be between 0 and 1"),
        ((-0.1,), r"must be between 0 and 1"),
        ((11, 10), r"done/total \(11/10\) must be between 0 and 1"),
        ((1, 0), "total must be greater than 0"),
        ((float("nan"),), "done must be a finite number"),
        (("half",), "done must be a number"),
        ((True,), "done must be a number"),
    ],
)
def test_a_bad_progress_is_a_value_error_and_writes_nothing(args, message):
    job = enqueue_job("demo.echo")
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    with pytest.raises(ValueError, match=message):
        CurrentJob(claimed, Attempt(claimed)).progress(*args)
    assert Job.objects.get(id=job.id).progress is None


def test_log_fields_are_stored_as_jsonb_can_hold_them():
    job = enqueue_job("demo.echo")
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    handle = CurrentJob(claimed, Attempt(claimed))
    odd_values = {"when": job.created_at, "nul": "a\x00b", "ratio": float("nan"), "nested": [{"k": 1}]}
    assert handle.log("odd values\x00", **odd_values)
    assert handle.log("large", blob="x" * 10_000)
    with pytest.raises(ValueError, match="message must be a string"):
        handle.log(42)
    odd, large = lines(job)
    assert odd.message == "odd values\\x00"
    assert odd.extra == {"when": str(job.created_at), "nul": "a\\x00b", "ratio": "nan", "nested": [{"k": 1}]}
    assert list(large.extra) == ["fields_truncated"] and len(large.extra["fields_truncated"]) == 8192


def test_current_job_keeps_the_claimed_jobs_fields():
    job = enqueue_job("demo.echo", {"a": 1})
    [claimed] = claim_jobs([str(job.id)], worker_id="w")
    handle = CurrentJob(claimed, Attempt(claimed))
    assert (handle.id, handle.type, handle.queue) == (str(job.id), "demo.echo", "default")
    assert handle.payload == {"a": 1}
    assert (handle.attempt, handle.fence, handle.max_attempts) == (1, claimed.fence, claimed.max_attempts)
    assert handle.trace_context is None


def test_a_trail_with_snoozes_and_reports_is_a_valid_path_for_the_chaos_run(monkeypatch, queue_config):
    queue_config(JOB_LOG_LINES_PER_SECOND=2)
    reported = enqueue_job("probe.report", {"progress": 10, "lines": 50})
    snoozed = enqueue_job("probe.snooze", {"times": 2, "seconds": 0})
    run_worker()
    assert {"job_log", "job_log_dropped", "snooze_fenced"} <= NON_TRANSITION_EVENTS
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "scripts"))
    from chaoslib.invariants import check_log_trails

    assert lines(reported, "job_log_dropped") and lines(snoozed, "snoozed")
    assert check_log_trails().violations == 0
    sys.modules.pop("chaoslib.invariants", None)

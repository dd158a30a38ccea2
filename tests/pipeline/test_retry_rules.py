"""Per-handler retry rules: ``retry_on`` / ``give_up_on``, the named backoffs and a backoff
function, ``RetryAfter`` (from a handler, a slot coroutine and a django.tasks task), and the
lease-expiry rescue doubling its delay like any other failure."""

import subprocess
from datetime import datetime, timedelta

import pytest
from django.db import connection
from structlog.testing import capture_logs

from queue_app import handlers
from queue_app.engine import execution
from queue_app.engine.retry_policy import backoff_delay, failure_policy
from queue_app.exceptions import RetryAfter
from queue_app.handlers import HandlerSpec, job_handler
from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job
from tests.helpers import child_env, claim_jobs, kill_group, manage, relay_all, run_worker, wait_until
from tests.pipeline.test_retry_policy import MICROSECOND, STALL_ALLOWANCE, events, observed_delays
from tests.probe.models import Execution
from tests.probe.retry_jobs import task_retry_after


def _handler(**options) -> HandlerSpec:
    return HandlerSpec(name="rules", func=lambda payload: None, **options)


def _retry_after_connection_error(seconds: float) -> RetryAfter:
    try:
        raise ConnectionError("busy")
    except ConnectionError as exc:
        try:
            raise RetryAfter(seconds) from exc
        except RetryAfter as retry:
            return retry


# --- the decision, without a worker ---------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "retried"),
    [
        ({}, ValueError("x"), True),
        ({"give_up_on": (ValueError,)}, ValueError("x"), False),
        ({"give_up_on": (ValueError,)}, KeyError("x"), True),
        ({"retry_on": (ConnectionError,)}, ConnectionResetError("x"), True),
        ({"retry_on": (ConnectionError,)}, ValueError("x"), False),
        ({"retry_on": ()}, ValueError("x"), False),
        # give_up_on wins over retry_on: "retry connection errors, but not a refused one".
        (
            {"retry_on": (ConnectionError,), "give_up_on": (ConnectionRefusedError,)},
            ConnectionRefusedError(),
            False,
        ),
        # A RetryAfter decides alone, whatever either list says.
        ({"give_up_on": (Exception,)}, RetryAfter(5), True),
        ({"retry_on": ()}, RetryAfter(5), True),
        # No exception reached the worker (a killed attempt): retried with the backoff.
        ({"retry_on": ()}, None, True),
    ],
)
def test_failure_policy_decides_from_the_handlers_lists(options, error, retried):
    retry, delay = failure_policy(_handler(**options), error, 1)
    assert retry is retried
    assert (delay is not None) is retried


def test_a_retry_after_sets_the_delay_over_the_backoff(settings):
    settings.JOBQUEUE = {"RETRY_BACKOFF_BASE_SECONDS": 3600}
    assert failure_policy(_handler(backoff="fixed"), RetryAfter(7.5), 3) == (True, 7.5)
    assert failure_policy(_handler(), RetryAfter(timedelta(minutes=2)), 1) == (True, 120.0)
    assert failure_policy(_handler(backoff="fixed"), ValueError(), 3) == (True, 3600)


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), 10 * 365 * 24 * 3600 + 1])
def test_a_retry_after_refuses_a_delay_out_of_range(seconds):
    with pytest.raises(ValueError, match="RetryAfter seconds must be from 0"):
        RetryAfter(seconds)


@pytest.mark.parametrize("seconds", ["5", None, True])
def test_a_retry_after_refuses_what_is_not_a_number(seconds):
    with pytest.raises(TypeError, match="RetryAfter needs a number of seconds"):
        RetryAfter(seconds)


def test_the_named_backoffs_and_their_cap(settings):
    settings.JOBQUEUE = {}
    linear = _handler(backoff="linear", retry_backoff_base=2, retry_backoff_max=7)
    assert [backoff_delay(linear, attempt) for attempt in (1, 2, 3, 4, 50)] == [2, 4, 6, 7, 7]
    fixed = _handler(backoff="fixed", retry_backoff_base=3, retry_backoff_max=100)
    assert [backoff_delay(fixed, attempt) for attempt in (1, 2, 9)] == [3, 3, 3]
    # Without options, the settings' base (2 s) and cap (3600 s); exponential by default.
    assert all(0 <= backoff_delay(_handler(), 3) <= 8 for _ in range(200))
    assert max(backoff_delay(_handler(), 3) for _ in range(200)) > 4


def test_a_backoff_function_gets_the_attempt_and_the_exception():
    seen = []

    def own(attempt, exc):
        seen.append((attempt, exc))
        return 1.5 * attempt

    error = TimeoutError()
    assert failure_policy(_handler(backoff=own), error, 4) == (True, 6.0)
    assert seen == [(4, error)]


@pytest.mark.parametrize("answer", [float("nan"), -1, "10", None, ZeroDivisionError])
def test_a_faulty_backoff_function_falls_back_to_the_default_backoff(answer):
    def own(attempt, exc):
        if answer is ZeroDivisionError:
            return 1 / 0
        return answer

    handler = _handler(backoff=own, retry_backoff_base=4, retry_backoff_max=4)
    with capture_logs() as logs:
        retry, delay = failure_policy(handler, ValueError(), 1)
    assert retry and 0 <= delay <= 4
    assert [log["event"] for log in logs] == ["backoff_function_failed"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backoff": "quadratic"}, "backoff must be one of exponential, linear, fixed or a function"),
        ({"retry_on": ("ValueError",)}, "retry_on must be a tuple of exception classes"),
        ({"give_up_on": (int,)}, "give_up_on must be a tuple of exception classes"),
    ],
)
def test_bad_retry_options_are_refused_at_registration(options, message):
    with pytest.raises(ValueError, match=message):
        job_handler("rules.bad", **options)


def test_one_exception_class_alone_is_taken_as_a_tuple(monkeypatch):
    monkeypatch.setattr(handlers, "_registry", dict(handlers._registry))  # registers for this test only
    handlers.job_handler("rules.one_class", retry_on=ConnectionError, give_up_on=KeyError)(
        lambda payload: None
    )
    spec = handlers.get_handler("rules.one_class")
    assert spec.retry_on == (ConnectionError,) and spec.give_up_on == (KeyError,)


def test_a_retry_after_raised_from_an_error_is_recorded_as_that_error():
    retry = _retry_after_connection_error(5)
    assert execution.error_summary(retry) == "ConnectionError: busy"
    assert execution.error_class_path(retry) == "builtins.ConnectionError"
    assert execution.error_summary(RetryAfter(5)) == "RetryAfter: retry in 5 s"
    assert execution.error_class_path(RetryAfter(5)) == "queue_app.exceptions.RetryAfter"


# --- through a worker -----------------------------------------------------------------

worker_test = pytest.mark.django_db(transaction=True)


@worker_test
@pytest.mark.redis
@pytest.mark.parametrize(
    ("error", "attempts"),
    [("connection", 3), ("value", 1), ("refused", 1)],
)
def test_only_errors_in_retry_on_are_retried_and_give_up_on_wins(error, attempts):
    job = enqueue_job("probe.retry_on", {"raise": error})  # 3 attempts allowed
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == attempts
    assert Execution.objects.filter(job_id=job.id).count() == attempts
    assert events(job).count("retry_scheduled") == attempts - 1


@worker_test
@pytest.mark.redis
@pytest.mark.parametrize(
    ("job_type", "payload", "delays"),
    [
        ("probe.linear", {}, [0.2, 0.4, 0.5]),
        ("probe.fixed", {}, [0.3, 0.3]),
        ("probe.own_backoff", {"raise": "timeout"}, [0.35, 0.45]),
        ("probe.own_backoff", {"raise": "value"}, [0.1, 0.2]),
    ],
)
def test_each_backoff_sets_the_wait_before_each_retry(job_type, payload, delays):
    job = enqueue_job(job_type, payload)
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == len(delays) + 1
    observed = observed_delays(job)
    assert len(observed) == len(delays)
    for seen, delay in zip(observed, delays, strict=True):
        assert delay - STALL_ALLOWANCE <= seen <= delay + MICROSECOND, (observed, delays)


@worker_test
@pytest.mark.redis
def test_a_backoff_function_that_fails_still_lets_the_job_retry():
    job = enqueue_job("probe.broken_backoff")
    with capture_logs() as logs:
        run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 2
    assert events(job).count("retry_scheduled") == 1
    assert [log for log in logs if log["event"] == "backoff_function_failed"]


@worker_test
@pytest.mark.redis
def test_a_retry_after_chooses_the_wait_even_past_give_up_on_and_a_long_backoff():
    """probe.retry_after gives up on every Exception and has an hour's backoff base."""
    job = enqueue_job("probe.retry_after", {"after": 0.4, "fail_first": 1})
    run_worker()
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 2 and job.result == {"attempt": 2}
    (seen,) = observed_delays(job)
    assert 0.4 - STALL_ALLOWANCE <= seen <= 0.4 + MICROSECOND
    retry = JobLog.objects.get(job_id=job.id, event="retry_scheduled")
    assert retry.message == "ConnectionError: probe service busy"


@worker_test
@pytest.mark.redis
def test_a_retry_after_still_charges_its_attempt_and_fails_when_none_are_left():
    job = enqueue_job("probe.retry_after", {"after": 0.1})  # asks again on every attempt
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 3
    assert events(job).count("retry_scheduled") == 2
    assert job.last_error == "ConnectionError: probe service busy"
    assert job.last_error_class == "builtins.ConnectionError"
    assert "RetryAfter: retry in 0.1 s" in job.last_error_traceback


@worker_test
@pytest.mark.redis
def test_a_django_task_may_raise_retry_after(queue_config):
    """A ``@task(max_attempts=3)`` raising RetryAfter on attempt 1 runs again after its delay,
    not the queue's backoff (an hour here), and succeeds."""
    queue_config(RETRY_BACKOFF_BASE_SECONDS=3600)
    result = task_retry_after.enqueue(0.3)
    run_worker()
    result.refresh()
    assert result.status == "SUCCESSFUL" and result.return_value == 2 and result.attempts == 2
    job = Job.objects.get(id=result.id)
    (seen,) = observed_delays(job)
    assert 0.3 - STALL_ALLOWANCE <= seen <= 0.3 + MICROSECOND
    assert JobLog.objects.get(job_id=job.id, event="retry_scheduled").message == "RetryAfter: rate limited"


# --- the lease-expiry rescue ------------------------------------------------------------


def _database_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


@worker_test
@pytest.mark.redis
def test_an_expired_lease_waits_the_handlers_backoff_doubling_per_attempt(queue_config, monkeypatch):
    """Before, every rescued job waited RETRY_BACKOFF_BASE_SECONDS whatever its attempt."""
    queue_config(RETRY_BACKOFF_BASE_SECONDS=10, RETRY_BACKOFF_MAX_SECONDS=1000)
    monkeypatch.setattr("queue_app.engine.retry_policy.full_jitter", lambda nominal: nominal)
    attempts = {enqueue_job("demo.echo", max_attempts=5).id: attempt for attempt in (1, 2, 3)}
    fixed = enqueue_job("probe.fixed")  # its own backoff: 0.3 s whatever the attempt
    last = enqueue_job("demo.echo", max_attempts=2)
    attempts |= {fixed.id: 2, last.id: 2}
    relay_all()
    claimed = claim_jobs([str(job_id) for job_id in attempts], worker_id="dead-worker")
    assert len(claimed) == len(attempts)
    for job_id, attempt in attempts.items():
        Job.objects.filter(id=job_id).update(
            attempts=attempt,
            lease_expires_at=Job.objects.get(id=job_id).lease_expires_at - timedelta(hours=1),
        )
    before = _database_now()
    rescued = execution.rescue_expired_leases()
    after = _database_now()
    assert len(rescued) == len(attempts)

    def delay_bounds(job_id) -> tuple[float, float]:
        due = Job.objects.get(id=job_id).next_retry_at
        return (due - after).total_seconds(), (due - before).total_seconds()

    expected = {1: 10, 2: 20, 3: 40}
    for job_id, attempt in attempts.items():
        if job_id in (fixed.id, last.id):
            continue
        low, high = delay_bounds(job_id)
        assert low - MICROSECOND <= expected[attempt] <= high + MICROSECOND, (attempt, low, high)
    low, high = delay_bounds(fixed.id)
    assert low - MICROSECOND <= 0.3 <= high + MICROSECOND
    last.refresh_from_db()
    assert last.status == "failed" and last.next_retry_at is None
    assert Job.objects.filter(id__in=attempts, status="queued").count() == len(attempts) - 1


# --- real worker processes --------------------------------------------------------------


def _run_processes_until(job, status: str, *worker_args: str) -> None:
    relay_all()
    env = child_env()
    worker = manage("runworker", *worker_args, env=env, stderr=subprocess.DEVNULL)
    relay = manage("runrelay", "--poll=0.2", env=env, stderr=subprocess.DEVNULL)  # sends the retry
    try:
        wait_until(
            lambda: Job.objects.filter(id=job.id, status=status).exists(),
            timeout=90,
            message=f"the job to be {status}",
        )
    finally:
        kill_group(worker)
        kill_group(relay)


@worker_test
@pytest.mark.redis
@pytest.mark.processes
@pytest.mark.parametrize(
    ("job_type", "worker_args", "message"),
    [
        ("probe.retry_after", (), "ConnectionError: probe service busy"),
        ("probe.async_retry_after", ("--slots", "2"), "RetryAfter: retry in 1 s"),
    ],
    ids=["main-thread", "slot"],
)
def test_a_runworker_process_retries_after_the_delay_the_handler_asked_for(job_type, worker_args, message):
    job = enqueue_job(job_type, {"after": 1.0, "fail_first": 1})
    _run_processes_until(job, "completed", *worker_args)
    job.refresh_from_db()
    assert job.attempts == 2 and job.result == {"attempt": 2}
    assert events(job) == ["enqueued", "claimed", "retry_scheduled", "claimed", "completed"]
    retry = JobLog.objects.get(job_id=job.id, event="retry_scheduled")
    assert message in retry.message
    (seen,) = observed_delays(job)
    assert 1.0 - STALL_ALLOWANCE <= seen <= 1.0 + MICROSECOND
    # Not claimed again before it was due.
    second_claim = JobLog.objects.filter(job_id=job.id, event="claimed").order_by("id")[1]
    assert second_claim.created_at >= datetime.fromisoformat(retry.extra["next_retry_at"])

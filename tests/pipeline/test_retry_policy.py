"""The retry policy: exponential backoff doubling per attempt, its cap and full jitter,
``give_up_on``, and a job hard-killed by the supervisor with attempts left."""

import subprocess
from datetime import datetime

import pytest

from queue_app.engine.retry_policy import exponential_delay, full_jitter
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.services import enqueue_job
from queue_app.testing import RunSummary, run_jobs
from tests.helpers import child_env, kill_group, manage, relay_all, run_worker, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

# PostgreSQL keeps microseconds: a delay of d seconds is stored to the nearest one.
MICROSECOND = 1e-6
# How long a loaded machine may stall a transaction between its now() and a later statement.
STALL_ALLOWANCE = 0.1


def events(job) -> list[str]:
    return list(JobLog.objects.filter(job_id=job.id).order_by("id").values_list("event", flat=True))


def observed_delays(job) -> list[float]:
    """Seconds between each retry's log row and its scheduled time: at most the delay drawn.

    ``next_retry_at`` is the failing transaction's ``now()`` plus the delay; the log
    row's ``created_at`` is its INSERT's ``statement_timestamp()`` (Django's ``Now()``),
    a little later in the same transaction, by as much as a loaded machine stalls it.
    """
    rows = JobLog.objects.filter(job_id=job.id, event="retry_scheduled").order_by("id")
    return [
        (datetime.fromisoformat(row.extra["next_retry_at"]) - row.created_at).total_seconds() for row in rows
    ]


@pytest.fixture
def drawn_delays(monkeypatch) -> list[tuple[float, float]]:
    """(nominal delay, delay drawn) of each exponential backoff fail_job draws, in order (the
    exact values, for an in-process worker). Every failed attempt draws one; the last one's
    goes unused (no attempt is left)."""
    drawn: list[tuple[float, float]] = []

    def recording(nominal: float) -> float:
        drawn.append((nominal, full_jitter(nominal)))
        return drawn[-1][1]

    monkeypatch.setattr("queue_app.engine.retry_policy.full_jitter", recording)
    return drawn


def assert_scheduled_after(job, delays: list[float]) -> None:
    """Each retry was scheduled with the delay drawn for it."""
    observed = observed_delays(job)
    assert len(observed) == len(delays)
    assert all(seen <= delay + MICROSECOND for seen, delay in zip(observed, delays, strict=True))
    assert all(seen >= delay - STALL_ALLOWANCE for seen, delay in zip(observed, delays, strict=True))


def assert_within_jitter(drawn: list[tuple[float, float]], expected: list[float]) -> None:
    """Each nominal delay is the expected one, and each draw lies between 0 and it (full jitter)."""
    assert [nominal for nominal, _ in drawn] == pytest.approx(expected)
    for attempt, (nominal, delay) in enumerate(drawn, start=1):
        assert 0 <= delay <= nominal, (attempt, delay, nominal)


def test_retry_delay_doubles_per_attempt_up_to_the_cap_with_full_jitter():
    """Full jitter as in the AWS Architecture Blog's "Exponential Backoff And Jitter" (2015):
    uniform between 0 and min(cap, base * 2**(attempt-1)), as Celery's ``retry_jitter``."""
    # base 2 s, cap 20 s: written out, not computed with the formula under test.
    nominal = {1: 2, 2: 4, 3: 8, 4: 16, 5: 20, 6: 20, 10: 20, 60: 20, 100: 20}
    for attempt, delay in nominal.items():
        draws = [exponential_delay(attempt, base=2, cap=20) for _ in range(2000)]
        assert all(0 <= draw <= delay for draw in draws), attempt
        # Jitter really spreads retries over the whole range (a miss is ~1e-40 likely).
        assert min(draws) < 0.05 * delay and max(draws) > 0.95 * delay, attempt


def test_failed_attempts_are_retried_after_the_handlers_doubling_capped_backoff(drawn_delays):
    job = enqueue_job("probe.backoff")  # base 0.25 s, cap 0.5 s, 5 attempts
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 5 and job.next_retry_at is None
    assert Execution.objects.filter(job_id=job.id).count() == 5
    # 0.25, 0.5, then 1.0 and 2.0 capped at 0.5.
    assert_within_jitter(drawn_delays[:-1], [0.25, 0.5, 0.5, 0.5])
    assert_scheduled_after(job, [delay for _, delay in drawn_delays[:-1]])
    # Each retry reached Redis through an outbox row due at that time, and no attempt
    # was claimed before it was due.
    retries = JobLog.objects.filter(job_id=job.id, event="retry_scheduled").order_by("id")
    claims = JobLog.objects.filter(job_id=job.id, event="claimed").order_by("id")[1:]
    schedules = OutboxMessage.objects.filter(job_id=job.id, action="schedule").order_by("id")
    for retry, claim, schedule in zip(retries, claims, schedules, strict=True):
        due = datetime.fromisoformat(retry.extra["next_retry_at"])
        assert schedule.score == pytest.approx(due.timestamp(), abs=MICROSECOND)
        assert claim.created_at >= due


def test_without_handler_options_the_backoff_comes_from_the_settings(queue_config, drawn_delays):
    queue_config(RETRY_BACKOFF_BASE_SECONDS=0.2, RETRY_BACKOFF_MAX_SECONDS=0.3)
    job = enqueue_job("demo.fail", max_attempts=4)
    run_worker()
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 4
    assert_within_jitter(drawn_delays[:-1], [0.2, 0.3, 0.3])
    assert_scheduled_after(job, [delay for _, delay in drawn_delays[:-1]])


@pytest.mark.parametrize("error", ["value", "subclass"])
def test_an_error_listed_in_give_up_on_fails_the_job_without_retrying(error):
    job = enqueue_job("probe.picky", {"raise": error})  # 3 attempts allowed
    assert run_jobs(with_scheduled=True) == RunSummary(failed=1)
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 1
    assert f"probe {error} error" in job.last_error
    assert events(job) == ["enqueued", "claimed", "failed"]
    assert not OutboxMessage.objects.filter(job_id=job.id, action="schedule").exists()


def test_an_error_not_listed_in_give_up_on_is_retried_until_attempts_run_out():
    job = enqueue_job("probe.picky", {"raise": "runtime"})
    assert run_jobs(with_scheduled=True) == RunSummary(retried=2, failed=1)
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == 3
    assert events(job) == [
        "enqueued",
        "claimed",
        "retry_scheduled",
        "claimed",
        "retry_scheduled",
        "claimed",
        "failed",
    ]


@pytest.mark.processes
def test_a_job_hard_killed_with_attempts_left_is_retried_then_fails_when_none_are_left():
    """The killed attempt counts like any failed one: retried with backoff, failed at the last."""
    job = enqueue_job("probe.stubborn_retried")  # soft limit 1 s, 2 attempts, backoff 0.5 s
    relay_all()
    env = child_env(JOBQUEUE_HARD_TIME_LIMIT_GRACE_SECONDS="1")
    worker = manage("runworker", env=env, stderr=subprocess.DEVNULL)
    relay = manage("runrelay", "--poll=0.2", env=env, stderr=subprocess.DEVNULL)  # sends the retry
    try:
        wait_until(
            lambda: Job.objects.filter(id=job.id, status="failed").exists(),
            timeout=120,
            message="both attempts to be killed",
        )
    finally:
        kill_group(worker)
        kill_group(relay)
    job.refresh_from_db()
    assert job.attempts == 2 and "process killed" in job.last_error
    assert events(job) == ["enqueued", "claimed", "retry_scheduled", "claimed", "failed"]
    retry = JobLog.objects.get(job_id=job.id, event="retry_scheduled")
    assert "JobTimeLimitExceeded" in retry.message and "process killed" in retry.message
    (delay,) = observed_delays(job)
    # The observed delay is the drawn one (0 to 0.5 s) less however long the failing
    # transaction stalled before its log row (observed_delays).
    assert -STALL_ALLOWANCE <= delay <= 0.5 + MICROSECOND
    # Both attempts really ran (and were killed), each in a worker process of its own.
    executions = list(Execution.objects.filter(job_id=job.id).order_by("attempt"))
    assert [e.attempt for e in executions] == [1, 2] and executions[0].pid != executions[1].pid

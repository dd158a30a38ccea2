"""The scheduler against PostgreSQL: one job per tick, the missed-tick policy, pausing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from structlog.testing import capture_logs

from queue_app.engine.scheduling import enqueue_schedule_tick
from queue_app.models import Job, JobLog, OutboxMessage, ScheduleState
from queue_app.runtime.scheduler import Scheduler, database_now
from queue_app.schedules import Schedule

pytestmark = pytest.mark.django_db

HOURLY = Schedule(name="hourly", type="demo.echo", cron="@every 1h", payload={"from": "schedule"})


@pytest.fixture
def clock(monkeypatch):
    """The schedulers' database clock, set by the test: ``clock.at = datetime(...)``."""

    class Clock:
        at: datetime

    fake = Clock()
    monkeypatch.setattr("queue_app.runtime.scheduler.database_now", lambda: fake.at)
    return fake


def first_seen(schedule: Schedule, clock, at: datetime) -> None:
    """The schedule's state row, as a scheduler running at ``at`` makes it."""
    clock.at = at
    Scheduler([schedule]).run_once()
    ScheduleState.objects.filter(name=schedule.name).update(created_at=at)


def jobs_of(schedule: Schedule) -> list[Job]:
    return list(Job.objects.filter(idempotency_key__startswith=f"schedule:{schedule.name}:"))


def test_a_new_schedule_waits_for_its_first_tick():
    Scheduler([HOURLY]).run_once()
    state = ScheduleState.objects.get(name="hourly")
    assert jobs_of(HOURLY) == []
    assert state.last_tick_at is None
    assert state.next_tick_at == HOURLY.next_tick(database_now())


def test_a_due_tick_enqueues_one_job_with_its_log_and_outbox_rows():
    Scheduler([HOURLY]).run_once()
    now = database_now()
    ScheduleState.objects.filter(name="hourly").update(created_at=now - timedelta(hours=1))
    Scheduler([HOURLY]).run_once()
    (job,) = jobs_of(HOURLY)
    tick = HOURLY.latest_tick(now)
    assert job.idempotency_key == f"schedule:hourly:{tick.isoformat()}"
    assert (job.type, job.payload, job.status) == ("demo.echo", {"from": "schedule"}, "queued")
    assert JobLog.objects.filter(job=job, event="enqueued").count() == 1
    assert OutboxMessage.objects.filter(job=job, action="enqueue").count() == 1
    state = ScheduleState.objects.get(name="hourly")
    assert (state.last_tick_at, state.last_job_id) == (tick, job.id)
    # The same tick again: nothing more.
    Scheduler([HOURLY]).run_once()
    assert len(jobs_of(HOURLY)) == 1


def test_missed_ticks_run_once_for_the_latest_one():
    Scheduler([HOURLY]).run_once()
    now = database_now()
    latest = HOURLY.latest_tick(now)
    # Every scheduler was down for five ticks.
    ScheduleState.objects.filter(name="hourly").update(last_tick_at=latest - timedelta(hours=5))
    Scheduler([HOURLY]).run_once()
    (job,) = jobs_of(HOURLY)
    assert job.idempotency_key == HOURLY.idempotency_key(latest)


def test_two_schedulers_on_one_tick_enqueue_one_job():
    Scheduler([HOURLY]).run_once()
    tick = HOURLY.latest_tick(database_now())
    ScheduleState.objects.filter(name="hourly").update(last_tick_at=tick - timedelta(hours=1))
    first = enqueue_schedule_tick(HOURLY, tick, next_tick=tick + timedelta(hours=1))
    second = enqueue_schedule_tick(HOURLY, tick, next_tick=tick + timedelta(hours=1))
    assert first is not None and second is None
    assert jobs_of(HOURLY) == [first]


def test_a_paused_schedule_passes_over_its_ticks_and_resumes_without_catching_up():
    Scheduler([HOURLY]).run_once()
    now = database_now()
    latest = HOURLY.latest_tick(now)
    ScheduleState.objects.filter(name="hourly").update(paused=True, last_tick_at=latest - timedelta(hours=3))
    Scheduler([HOURLY]).run_once()
    state = ScheduleState.objects.get(name="hourly")
    assert jobs_of(HOURLY) == []
    assert state.last_tick_at == latest and state.last_job_id is None
    ScheduleState.objects.filter(name="hourly").update(paused=False)
    Scheduler([HOURLY]).run_once()
    assert jobs_of(HOURLY) == []


def test_a_schedule_that_fails_is_logged_and_the_others_still_run():
    broken = Schedule(name="broken", type="demo.echo", cron="0 3 * * *")
    object.__setattr__(broken, "cron", "0 0 30 2 *")  # no tick at all: croniter raises
    Scheduler([broken, HOURLY]).run_once()
    now = database_now()
    ScheduleState.objects.filter(name="hourly").update(created_at=now - timedelta(hours=1))
    with capture_logs() as logs:
        next_tick = Scheduler([broken, HOURLY]).run_once()
    assert len(jobs_of(HOURLY)) == 1
    assert next_tick == HOURLY.next_tick(now)
    (failed,) = [entry for entry in logs if entry["event"] == "schedule_failed"]
    assert failed["schedule"] == "broken" and "CroniterBadDateError" in failed["error"]


def test_a_changed_cron_starts_afresh_without_running_its_latest_tick_late(clock):
    at_three = Schedule(name="daily", type="demo.echo", cron="0 3 * * *")
    first_seen(at_three, clock, datetime(2025, 1, 1, tzinfo=UTC))
    clock.at = datetime(2025, 1, 1, 3, 0, 1, tzinfo=UTC)
    Scheduler([at_three]).run_once()
    # Moved to 09:00 in a release deployed at 10:00: today's 09:00 was never due.
    at_nine = Schedule(name="daily", type="demo.echo", cron="0 9 * * *")
    clock.at = datetime(2025, 1, 1, 10, tzinfo=UTC)
    with capture_logs() as logs:
        Scheduler([at_nine]).run_once()
    assert [entry["event"] for entry in logs] == ["schedule_redefined"]
    clock.at = datetime(2025, 1, 2, 9, 0, 1, tzinfo=UTC)
    Scheduler([at_nine]).run_once()
    assert sorted(job.idempotency_key for job in jobs_of(at_nine)) == [
        "schedule:daily:2025-01-01T03:00:00+00:00",
        "schedule:daily:2025-01-02T09:00:00+00:00",
    ]


def test_a_row_from_before_definitions_keeps_its_missed_tick(clock):
    first_seen(HOURLY, clock, datetime(2025, 1, 1, tzinfo=UTC))
    ScheduleState.objects.filter(name="hourly").update(definition="")
    clock.at = datetime(2025, 1, 1, 5, 30, tzinfo=UTC)  # the schedulers were down for the upgrade
    Scheduler([HOURLY]).run_once()
    (job,) = jobs_of(HOURLY)
    assert job.idempotency_key == HOURLY.idempotency_key(datetime(2025, 1, 1, 5, tzinfo=UTC))
    assert ScheduleState.objects.get(name="hourly").definition == "@every 3600s"


def test_ticks_run_on_after_the_database_clock_ran_ahead_and_was_corrected(clock):
    every_ten = Schedule(name="ten", type="demo.echo", cron="*/10 * * * *")
    first_seen(every_ten, clock, datetime(2025, 1, 1, tzinfo=UTC))
    for now in (datetime(2025, 1, 1, 0, 10, 1, tzinfo=UTC), datetime(2025, 1, 2, 0, 0, 1, tzinfo=UTC)):
        clock.at = now  # the second one a day ahead
        Scheduler([every_ten]).run_once()
    with capture_logs() as logs:
        for minute in (20, 30):
            clock.at = datetime(2025, 1, 1, 0, minute, 1, tzinfo=UTC)
            Scheduler([every_ten]).run_once()
    assert sorted(job.idempotency_key.removeprefix("schedule:ten:") for job in jobs_of(every_ten)) == [
        "2025-01-01T00:10:00+00:00",
        "2025-01-01T00:20:00+00:00",
        "2025-01-01T00:30:00+00:00",
        "2025-01-02T00:00:00+00:00",
    ]
    assert [entry["event"] for entry in logs if entry["log_level"] == "error"] == ["schedule_clock_went_back"]
    # Its early job is the job of that tick when the clock reaches it (the same idempotency key).
    clock.at = datetime(2025, 1, 2, 0, 0, 1, tzinfo=UTC)
    Scheduler([every_ten]).run_once()
    assert len(jobs_of(every_ten)) == 4

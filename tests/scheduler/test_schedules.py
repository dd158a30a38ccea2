"""Schedule declarations and tick arithmetic: cron in a time zone, @every intervals, and the checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from queue_app import handlers, schedules
from queue_app.handlers import job_handler
from queue_app.schedules import Schedule, ScheduleError, all_schedules, parse_interval, periodic

PARIS = ZoneInfo("Europe/Paris")


def at(*parts, tz=UTC) -> datetime:
    return datetime(*parts, tzinfo=tz)


def test_cron_ticks_fall_in_the_schedule_time_zone():
    nightly = Schedule(name="nightly", type="demo.echo", cron="0 3 * * *", timezone="Europe/Paris")
    # 03:00 in Paris is 02:00 UTC in winter and 01:00 UTC in summer.
    assert nightly.next_tick(at(2026, 1, 10, 12)) == at(2026, 1, 11, 2)
    assert nightly.next_tick(at(2026, 7, 10, 12)) == at(2026, 7, 11, 1)


def test_a_cron_tick_that_falls_in_the_spring_gap_runs_at_the_first_time_after_it_if_its_hour_is_set():
    # 02:30 does not exist in Paris on 2026-03-29 (clocks go from 02:00 to 03:00);
    # croniter runs it at 03:00 local, as Vixie cron does.
    early = Schedule(name="early", type="demo.echo", cron="30 2 * * *", timezone="Europe/Paris")
    assert early.next_tick(at(2026, 3, 29, 0, 0, tz=PARIS)) == at(2026, 3, 29, 3, 0, tz=PARIS)
    # With "*" for the hour, the skipped hour has no tick (docs/how-to/periodic-jobs.md says so).
    hourly = Schedule(name="hourly", type="demo.echo", cron="30 * * * *", timezone="Europe/Paris")
    assert hourly.next_tick(at(2026, 3, 29, 1, 30, tz=PARIS)) == at(2026, 3, 29, 3, 30, tz=PARIS)


def test_a_cron_tick_in_the_repeated_autumn_hour_runs_at_both_instants():
    # 02:30 happens twice in Paris on 2026-10-25 (clocks go back from 03:00 to 02:00).
    early = Schedule(name="early", type="demo.echo", cron="30 2 * * *", timezone="Europe/Paris")
    first = early.next_tick(at(2026, 10, 24, 12))
    assert (first, early.next_tick(first)) == (at(2026, 10, 25, 0, 30), at(2026, 10, 25, 1, 30))


def test_next_tick_is_strictly_after_and_latest_tick_at_or_before():
    hourly = Schedule(name="h", type="demo.echo", cron="0 * * * *")
    assert hourly.next_tick(at(2026, 5, 1, 10)) == at(2026, 5, 1, 11)
    assert hourly.latest_tick(at(2026, 5, 1, 10)) == at(2026, 5, 1, 10)
    assert hourly.latest_tick(at(2026, 5, 1, 10, 59, 59)) == at(2026, 5, 1, 10)


def test_every_interval_ticks_are_multiples_of_the_interval_since_the_epoch():
    every = Schedule(name="e", type="demo.echo", cron="@every 30s")
    assert every.latest_tick(at(2026, 5, 1, 10, 0, 45)) == at(2026, 5, 1, 10, 0, 30)
    assert every.next_tick(at(2026, 5, 1, 10, 0, 30)) == at(2026, 5, 1, 10, 1, 0)
    assert parse_interval("1h30m") == timedelta(minutes=90)
    assert parse_interval("2d") == timedelta(days=2)


@pytest.mark.parametrize(
    "cron",
    [
        "R * * * *",  # croniter's random value: each scheduler process would pick its own ticks
        "0 R * * *",
        "5-1 * * * *",  # croniter wraps a falling range round to the whole field
        "0 3 * * fri-mon",
        "5-5 * * * *",  # and a one-value range too
        "5/10 * * * *",  # Vixie cron steps only * or a range
        "0 0 L * *",  # croniter extensions
        "0 0 * * 5#3",
    ],
)
def test_only_plain_cron_is_accepted(cron):
    with pytest.raises(ScheduleError, match=r"'broken': 'cron'"):
        Schedule(name="broken", type="demo.echo", cron=cron)


def test_day_of_month_and_day_of_week_combine_as_in_vixie_cron():
    def ticks(cron: str) -> list[str]:
        schedule, tick, days = Schedule(name="days", type="demo.echo", cron=cron), at(2025, 6, 25), []
        for _ in range(4):
            tick = schedule.next_tick(tick)
            days.append(tick.strftime("%a %d"))
        return days

    # Both restricted: a day matching either runs (the 1st, and every Monday).
    assert ticks("0 0 1 * MON") == ["Mon 30", "Tue 01", "Mon 07", "Mon 14"]
    # One starts with "*": a day must match both (Mondays that fall on an odd date).
    assert ticks("0 0 */2 * MON") == ["Mon 07", "Mon 21", "Mon 11", "Mon 25"]
    odd_mondays = Schedule(name="days", type="demo.echo", cron="0 0 */2 * MON")
    assert odd_mondays.latest_tick(at(2025, 7, 20)) == at(2025, 7, 7)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "* * * * * *"}, "'cron'"),  # 6 fields: seconds are not standard cron
        ({"cron": "61 * * * *"}, "'cron'"),
        ({"cron": "@every 0s"}, "at least 1s"),
        ({"cron": "@every soon"}, "not an interval"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "'timezone'"),
        ({"cron": "* * * * *", "priority": "urgent"}, "'priority'"),
        ({"cron": "* * * * *", "payload": [1]}, "'payload'"),
        # Accepted by croniter and Python, then failing at every tick:
        ({"cron": "0 0 30 2 *"}, "'cron' '0 0 30 2 \\*' has no ticks"),
        ({"cron": "@every 3000000d"}, "at most 365d"),
        ({"cron": "@every 99999999999d"}, "at most 365d"),
        ({"cron": "* * * * *", "queue": ["default"]}, "'queue'"),
    ],
)
def test_a_bad_schedule_names_the_schedule_and_the_field(options, message):
    with pytest.raises(ScheduleError, match=message) as raised:
        Schedule(name="broken", type="demo.echo", **options)
    assert "'broken'" in str(raised.value)


def test_schedules_come_from_settings_as_a_dict_or_json(settings):
    settings.JOBQUEUE = {"SCHEDULES": {"tick": {"type": "demo.echo", "cron": "@every 1m"}}}
    assert [s.name for s in all_schedules()] == ["tick"]
    settings.JOBQUEUE = {"SCHEDULES": '{"tock": {"type": "demo.echo", "cron": "*/5 * * * *"}}'}
    assert [s.cron for s in all_schedules()] == ["*/5 * * * *"]


def test_periodic_declares_a_schedule_for_the_handler_in_either_decorator_order(monkeypatch):
    monkeypatch.setattr(schedules, "_declared", [])
    monkeypatch.setattr(handlers, "_registry", dict(handlers._registry))

    @periodic("0 6 * * 1", timezone="Europe/Paris", payload={"kind": "weekly"})
    @job_handler("tests.weekly_report")
    def weekly_report(payload):
        return payload

    @job_handler("tests.hourly_cleanup")
    @periodic("@every 1h", name="cleanup")
    def hourly_cleanup(payload):
        return payload

    by_name = {s.name: s for s in all_schedules()}
    assert by_name["tests.weekly_report"].type == "tests.weekly_report"
    assert by_name["tests.weekly_report"].payload == {"kind": "weekly"}
    assert by_name["cleanup"].type == "tests.hourly_cleanup"


def test_a_schedule_whose_handler_is_missing_is_a_check_error(settings):
    settings.JOBQUEUE = {"SCHEDULES": {"ghost": {"type": "no.such.handler", "cron": "* * * * *"}}}
    with pytest.raises(SystemCheckError, match=r"queue_app\.E003.*'ghost'.*'no\.such\.handler'"):
        call_command("check")


def test_a_malformed_schedule_is_a_check_error(settings):
    settings.JOBQUEUE = {"SCHEDULES": {"typo": {"type": "demo.echo", "cron": "0 3 * *"}}}
    with pytest.raises(SystemCheckError, match=r"queue_app\.E002.*'typo'.*'cron'"):
        call_command("check")


@pytest.mark.parametrize("queue", ["nope", ["default"]])
def test_a_schedule_on_an_unknown_queue_is_a_check_error(settings, queue):
    settings.JOBQUEUE = {"SCHEDULES": {"q": {"type": "demo.echo", "cron": "@every 1m", "queue": queue}}}
    with pytest.raises(SystemCheckError, match=r"queue_app\.E002.*'q'.*'queue'"):
        call_command("check")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"when": datetime(2026, 1, 1)}, "datetime is not JSON"),
        ({"x": float("nan")}, "NaN"),
        ({"x": "a" * 300_000}, "larger than 262144 bytes"),
        ({"x": [[[[[1]]]]]}, "nested deeper than 4 levels"),
    ],
)
def test_a_payload_enqueue_would_refuse_is_a_check_error(settings, payload, message):
    settings.JOBQUEUE = {
        "MAX_PAYLOAD_BYTES": 262144,
        "MAX_PAYLOAD_DEPTH": 4,
        "SCHEDULES": {"p": {"type": "demo.echo", "cron": "@every 1m", "payload": payload}},
    }
    with pytest.raises(SystemCheckError, match=rf"queue_app\.E002.*'p': 'payload': {message}"):
        call_command("check")


def test_a_valid_schedule_passes_the_checks(settings):
    nightly = {"type": "demo.echo", "cron": "@daily", "timezone": "Asia/Tokyo"}
    crons = ["@midnight", "@annually", "0 3 ? * *", "*/15 0-6/2 1,15 * sun", "0 0 * jan,JUL Mon-Fri"]
    others = {f"ok-{n}": {"type": "demo.echo", "cron": cron} for n, cron in enumerate(crons)}
    settings.JOBQUEUE = {"SCHEDULES": {"ok": nightly, **others}}
    call_command("check")

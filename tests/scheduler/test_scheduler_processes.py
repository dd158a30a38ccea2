"""Two real ``runscheduler`` processes on one schedule: each tick gives exactly one job."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import datetime, timedelta

import pytest

from queue_app.models import Job, ScheduleState
from tests.helpers import Events, child_env, kill_group, manage, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

SCHEDULES = json.dumps({"every-second": {"type": "demo.echo", "cron": "@every 1s"}})


def ticks() -> list[datetime]:
    keys = Job.objects.filter(idempotency_key__startswith="schedule:every-second:").values_list(
        "idempotency_key", flat=True
    )
    return sorted(datetime.fromisoformat(key.removeprefix("schedule:every-second:")) for key in keys)


def test_two_schedulers_for_three_ticks_give_three_jobs():
    env = child_env(JOBQUEUE_SCHEDULES=SCHEDULES, LOG_LEVEL="INFO")
    started = [Events(manage("runscheduler", env=env, stderr=subprocess.PIPE, text=True)) for _ in range(2)]
    schedulers = [each.process for each in started]
    try:
        # Both running (their stop signals handled) before the ticks count: otherwise one
        # could tick alone while the other still loads Django.
        for each in started:
            wait_until(lambda each=each: each.named("scheduler_started"), timeout=60, message="a scheduler")
        first = wait_until(lambda: ticks()[:1], message="the first tick's job")[0]
        third = first + timedelta(seconds=2)
        wait_until(
            lambda: ScheduleState.objects.filter(name="every-second", last_tick_at__gte=third).exists(),
            message="three ticks",
        )
        assert all(process.poll() is None for process in schedulers), "a scheduler died"
        for process in schedulers:
            process.send_signal(signal.SIGTERM)
        assert [process.wait(timeout=30) for process in schedulers] == [0, 0]
    finally:
        for process in schedulers:
            kill_group(process)
    seen = ticks()
    assert [tick for tick in seen if tick <= third] == [first, first + timedelta(seconds=1), third]
    # Ticks after the third (until both stopped) are each there once, none skipped.
    assert seen == [first + timedelta(seconds=n) for n in range(len(seen))]
    assert Job.objects.filter(type="demo.echo").count() == len(seen)

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


def passed_over(missed_events: list[dict]) -> set[datetime]:
    """The one-second ticks ``schedule_ticks_missed`` events name: first_missed up to running."""
    ticks = set()
    for event in missed_events:
        tick, running = (
            datetime.fromisoformat(event["first_missed"]),
            datetime.fromisoformat(event["running"]),
        )
        while tick < running:
            ticks.add(tick)
            tick += timedelta(seconds=1)
    return ticks


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
    # Every tick from the first until both stopped is there once, but for the policy of a
    # scheduler that fell behind (stalled over a second on a loaded machine): it runs the
    # latest tick only and logs those it passed over, which alone may be absent.
    skipped = passed_over([event for each in started for event in each.named("schedule_ticks_missed")])
    every = [first + timedelta(seconds=n) for n in range(int((seen[-1] - first).total_seconds()) + 1)]
    assert seen == [tick for tick in every if tick not in skipped]
    assert Job.objects.filter(type="demo.echo").count() == len(seen)

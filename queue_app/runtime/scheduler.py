"""The scheduler: turns the ticks of periodic schedules into jobs.

Run as many as you like (one per host for redundancy): each tick becomes
exactly one job whichever scheduler gets there first (see
``queue_app.engine.scheduling``). Times come from the database clock, so
schedulers on hosts with drifting clocks still agree.

Missed ticks (every scheduler was down): once one runs again, each schedule
whose ticks were missed runs **once**, for the latest missed tick; older
missed ticks are skipped (Celery beat and cron do the same). A new schedule
starts with its first tick after it was first seen; a paused schedule's ticks
are passed over, so resuming it does not run it late. A schedule whose
definition (cron, interval, time zone) changed starts afresh from now.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from queue_app.conf import queue_settings
from queue_app.engine.scheduling import (
    enqueue_schedule_tick,
    ensure_schedule_states,
    pass_over_paused_tick,
    redefine_schedule,
    rewind_schedule,
)
from queue_app.engine.selectors import database_now
from queue_app.exceptions import QueueError
from queue_app.models import ScheduleState
from queue_app.observability.logs import get_logger
from queue_app.runtime.outages import STORE_ERRORS, OutageGuard
from queue_app.runtime.stop_signal import StopSignal
from queue_app.schedules import Schedule, all_schedules

log = get_logger(__name__)

MIN_SLEEP_SECONDS = 0.01
# A schedule handled further ahead of the database clock than this saw the clock go back.
CLOCK_STEP_TOLERANCE = timedelta(minutes=1)


class Scheduler:
    """``run_once`` handles every due tick; ``run_forever`` sleeps until the next one."""

    def __init__(self, schedules: list[Schedule] | None = None, *, poll_seconds: float | None = None) -> None:
        self.schedules = all_schedules() if schedules is None else schedules
        self.poll_seconds = poll_seconds or queue_settings().SCHEDULER_POLL_SECONDS
        self.enqueued_total = 0
        self._stop = StopSignal()

    def stop(self) -> None:
        """Return after the current pass (safe from a signal handler)."""
        self._stop.set()

    def run_once(self) -> datetime:
        """Enqueue the latest due tick of each schedule; returns when the next tick falls."""
        now = database_now()
        states = {state.name: state for state in ScheduleState.objects.filter(name__in=self._names())}
        next_ticks = []
        for schedule in self.schedules:
            try:
                next_ticks.append(self._run_schedule(schedule, states.get(schedule.name), now))
            except STORE_ERRORS:
                raise  # an outage: run_forever backs off
            except Exception as exc:  # noqa: BLE001 - one schedule's own failure must not stop the others
                log.error("schedule_failed", schedule=schedule.name, error=repr(exc))
        return min(next_ticks, default=now + timedelta(seconds=self.poll_seconds))

    def _run_schedule(self, schedule: Schedule, state: ScheduleState | None, now: datetime) -> datetime:
        """Handle the schedule's latest tick if due; returns its next tick."""
        next_tick = schedule.next_tick(now)
        if state is None:
            ensure_schedule_states([schedule], now=now)  # its earlier ticks never run
            return next_tick
        tick = schedule.latest_tick(now)
        if state.definition != schedule.definition:
            if redefine_schedule(schedule, state.definition, tick=tick, next_tick=next_tick):
                return next_tick
        handled_until = state.last_tick_at or state.created_at
        if handled_until > now + CLOCK_STEP_TOLERANCE:
            handled_until = rewind_schedule(schedule, state, tick=tick)
        if tick <= handled_until:
            return next_tick
        if state.paused:
            pass_over_paused_tick(schedule, tick, next_tick=next_tick)
            return next_tick
        missed_since = schedule.next_tick(handled_until)
        if missed_since < tick:
            log.warning(
                "schedule_ticks_missed",
                schedule=schedule.name,
                first_missed=missed_since.isoformat(),
                running=tick.isoformat(),
            )
        try:
            if enqueue_schedule_tick(schedule, tick, next_tick=next_tick) is not None:
                self.enqueued_total += 1
        except QueueError as exc:
            # The whole tick rolled back; it is tried again on the next pass.
            log.error("schedule_enqueue_failed", schedule=schedule.name, error=str(exc))
        return next_tick

    def run_forever(self) -> None:
        """Run until stopped, sleeping until the next tick (at most ``poll_seconds``)."""
        guard = OutageGuard("scheduler")
        log.info("scheduler_started", schedules=self._names())
        while not self._stop.is_set():
            done, wait = guard.attempt(
                lambda: (self.run_once() - database_now()).total_seconds(), sleep=self._stop.wait
            )
            if done:
                self._stop.wait(min(max(wait, MIN_SLEEP_SECONDS), self.poll_seconds))
        log.info("scheduler_stopped", enqueued=self.enqueued_total)

    def _names(self) -> list[str]:
        return [schedule.name for schedule in self.schedules]

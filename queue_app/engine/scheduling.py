"""Periodic ticks: each tick of a schedule becomes exactly one job.

A scheduler wins a tick by moving its schedule's ``last_tick_at`` forward
with a conditional UPDATE, in the same transaction as the enqueue. A second
scheduler racing for the same tick blocks on the row lock, then finds the
condition false and enqueues nothing. The idempotency key
``schedule:<name>:<tick>`` is a second guard, and lets a user find the job
of a tick.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import DateTimeField, Q, QuerySet, Value
from django.db.models.functions import Greatest

from queue_app.engine.enqueue import enqueue_job
from queue_app.models import Job, ScheduleState
from queue_app.observability.logs import get_logger
from queue_app.schedules import Schedule

log = get_logger(__name__)


def ensure_schedule_states(schedules: list[Schedule], *, now: datetime) -> None:
    """A state row for each schedule; a new one starts at ``now`` (its earlier ticks never run)."""
    ScheduleState.objects.bulk_create(
        [
            ScheduleState(name=s.name, next_tick_at=s.next_tick(now), definition=s.definition)
            for s in schedules
        ],
        ignore_conflicts=True,
    )


def redefine_schedule(schedule: Schedule, previous: str, *, tick: datetime, next_tick: datetime) -> bool:
    """Record the schedule's new definition; True when its ticks changed (not for a row that had none).

    The new definition's ticks up to ``tick`` (the latest at or before now) count
    as handled: one that fell before the change, such as 09:00 for a schedule moved
    from 03:00 to 09:00 at 10:00, is not run late as if it had been missed.
    """
    changes: dict = {"definition": schedule.definition}
    if previous:
        handled = Value(tick, output_field=DateTimeField())
        changes.update(last_tick_at=Greatest("last_tick_at", handled), next_tick_at=next_tick)
    changed = ScheduleState.objects.filter(name=schedule.name, definition=previous).update(**changes)
    if changed and previous:
        log.warning(
            "schedule_redefined",
            schedule=schedule.name,
            previous=previous,
            definition=schedule.definition,
            handled_until=tick.isoformat(),
        )
    return bool(changed and previous)


def _advance(schedule: Schedule, tick: datetime, next_tick: datetime, *, paused: bool) -> bool:
    """Move ``last_tick_at`` to ``tick`` if no scheduler did; True for the one that did."""
    return bool(
        ScheduleState.objects.filter(name=schedule.name, paused=paused)
        .filter(Q(last_tick_at__isnull=True) | Q(last_tick_at__lt=tick))
        .update(last_tick_at=tick, next_tick_at=next_tick)
    )


def enqueue_schedule_tick(schedule: Schedule, tick: datetime, *, next_tick: datetime) -> Job | None:
    """Enqueue the job of ``tick``; None when another scheduler already did, or the schedule is paused."""
    with transaction.atomic():
        if not _advance(schedule, tick, next_tick, paused=False):
            return None
        job = enqueue_job(
            schedule.type,
            schedule.payload,
            queue=schedule.queue,
            priority=schedule.priority,
            idempotency_key=schedule.idempotency_key(tick),
        )
        ScheduleState.objects.filter(name=schedule.name).update(last_job=job)
    log.info("schedule_tick_enqueued", schedule=schedule.name, tick=tick.isoformat(), job_id=str(job.id))
    return job


def pass_over_paused_tick(schedule: Schedule, tick: datetime, *, next_tick: datetime) -> bool:
    """Record a paused schedule's tick as handled, so resuming does not run it late."""
    passed = _advance(schedule, tick, next_tick, paused=True)
    if passed:
        log.info("schedule_tick_paused", schedule=schedule.name, tick=tick.isoformat())
    return passed


def resume_schedules(states: QuerySet[ScheduleState], declared: dict[str, Schedule], *, now: datetime) -> int:
    """Unpause; the ticks up to ``now`` count as handled, so none that fell while paused runs late.

    A scheduler passes over a paused schedule's ticks, but only if one ran
    while it was paused; this covers the ticks none saw. Returns how many resumed.
    """
    resumed = 0
    for state in states.filter(paused=True):
        changes: dict = {"paused": False}
        schedule = declared.get(state.name)
        if schedule is not None:
            tick = Value(schedule.latest_tick(now), output_field=DateTimeField())
            # GREATEST skips a NULL last_tick_at; it never moves the handled point back.
            changes.update(last_tick_at=Greatest("last_tick_at", tick), next_tick_at=schedule.next_tick(now))
        resumed += ScheduleState.objects.filter(name=state.name, paused=True).update(**changes)
    return resumed


def rewind_schedule(schedule: Schedule, state: ScheduleState, *, tick: datetime) -> datetime:
    """Move a handled point the clock has gone back behind to just before ``tick``; returns it.

    Without this, a database clock that ran ahead and was corrected left every
    real tick up to the time it had reached skipped, silently.
    """
    handled_until = state.last_tick_at or state.created_at
    before = schedule.latest_tick(tick - timedelta(microseconds=1))
    # last_tick_at=None filters on IS NULL: only the first scheduler here rewinds and logs.
    if ScheduleState.objects.filter(name=schedule.name, last_tick_at=state.last_tick_at).update(
        last_tick_at=before
    ):
        log.error(
            "schedule_clock_went_back",
            schedule=schedule.name,
            handled_until=handled_until.isoformat(),
            rewound_to=before.isoformat(),
        )
    return before

"""Periodic jobs: what a schedule is, how its ticks fall, and where schedules are declared.

A schedule enqueues one job of a registered type at each tick of a standard
5-field cron expression (``"0 3 * * *"``, read by croniter with Vixie cron's
day rule, plus the ``@daily``-style aliases) in a time zone, or of an interval
(``"@every 30s"``; units s, m, h, d, combinable as ``"@every 1h30m"``).
Interval ticks are whole multiples of the interval since the Unix epoch, so
every scheduler process, on any host, computes the same ticks.

Schedules are declared in ``settings.JOBQUEUE["SCHEDULES"]`` or with
``@periodic(...)`` on a handler; ``queue_app.runtime.scheduler`` runs them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from queue_app.handlers import Handler, registered_handlers
from queue_app.states import Priority

EVERY_PREFIX = "@every"
_INTERVAL_PART = re.compile(r"(\d+)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Long enough for any periodic job, short enough that no tick falls past the year 9999.
MAX_INTERVAL = timedelta(days=365)
_CHECK_TICKS_AT = datetime(2000, 1, 1, tzinfo=UTC)
_SCHEDULE_KEYS = {"type", "cron", "timezone", "payload", "queue", "priority"}
_CRON_ALIASES = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
_WEEKDAYS = "sun mon tue wed thu fri sat".split()
_CRON_NAMES = {
    3: {name: n for n, name in enumerate(_MONTHS, 1)},
    4: {name: n for n, name in enumerate(_WEEKDAYS)},
}
_CRON_ITEM = re.compile(r"(\*|[0-9a-z]+)(?:-([0-9a-z]+))?(?:/([0-9]+))?")


class ScheduleError(ValueError):
    """A schedule is badly declared; the message names the schedule and the field."""


def parse_interval(text: str) -> timedelta:
    """``"30s"``, ``"5m"``, ``"1h30m"`` -> a positive timedelta."""
    compact = text.replace(" ", "")
    parts = _INTERVAL_PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"{text!r} is not an interval like 30s, 5m, 1h30m or 1d")
    seconds = sum(int(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    if seconds <= 0:
        raise ValueError("the interval must be at least 1s")
    if seconds > MAX_INTERVAL.total_seconds():
        raise ValueError(f"the interval must be at most {MAX_INTERVAL.days}d")
    return timedelta(seconds=seconds)


def _cron_value(field: int, text: str) -> int | None:
    return int(text) if text.isdigit() else _CRON_NAMES.get(field, {}).get(text)


def _cron_problem(cron: str) -> str | None:
    """Why ``cron`` is not plain 5-field cron, or None (croniter checks the value ranges).

    croniter reads more than cron, and some of it would break the one-job-per-tick
    promise: ``R`` and ``H`` pick values that differ in each scheduler process,
    and ``5-1`` or ``5-5`` wrap round to span the whole field. Only numbers,
    month and day names, ``*``, ``?``, lists, rising ranges and steps of ``*``
    or of a range pass (as in Vixie cron); ``L``, ``W`` and ``#`` do not.
    """
    lowered = cron.strip().lower()
    if lowered.startswith("@"):
        return None if lowered in _CRON_ALIASES else f"the aliases are {', '.join(_CRON_ALIASES)}"
    fields = lowered.split()
    if len(fields) != 5:
        return "it needs 5 fields: minute hour day-of-month month day-of-week"
    for index, text in enumerate(fields):
        if text == "?" and index in (2, 4):
            continue
        for item in text.split(","):
            match = _CRON_ITEM.fullmatch(item)
            if match is None:
                return f"{item!r} is not a number, name, *, range or step"
            start, end, step = match.groups()
            if start == "*" and end is None:
                continue
            values = [_cron_value(index, part) for part in (start, end) if part is not None]
            if None in values:
                return f"{item!r} is not a number, name, *, range or step"
            if end is None and step is not None:
                return f"{item!r}: a step goes after * or a range"
            if end is not None and values[0] >= values[1]:
                return f"{item!r}: a range must go up"
    return None


@dataclass(frozen=True)
class Schedule:
    """One periodic job: enqueue ``type`` with ``payload`` at every tick of ``cron``."""

    name: str
    type: str
    cron: str
    timezone: str = "UTC"
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: str = Priority.MEDIUM

    def __post_init__(self) -> None:
        where = f"schedule {self.name!r}"
        if not isinstance(self.name, str) or not 1 <= len(self.name) <= 100:
            raise ScheduleError(f"{where}: name must be 1 to 100 characters")
        if not isinstance(self.type, str) or not self.type:
            raise ScheduleError(f"{where}: 'type' must name a job handler")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise ScheduleError(f"{where}: 'timezone' {self.timezone!r} is not a known time zone")
        if not isinstance(self.cron, str):
            raise ScheduleError(f"{where}: 'cron' must be a string")
        if self.cron.startswith(EVERY_PREFIX):
            try:
                parse_interval(self.cron.removeprefix(EVERY_PREFIX))
            except ValueError as exc:
                raise ScheduleError(f"{where}: 'cron': {exc}")
        else:
            problem = _cron_problem(self.cron)
            if problem or not croniter.is_valid(self.cron):
                raise ScheduleError(
                    f"{where}: 'cron' {self.cron!r} is not a 5-field cron expression or '@every <interval>'"
                    + (f" ({problem})" if problem else "")
                )
        try:
            # croniter accepts dates no year has ("0 0 30 2 *"), then fails at every tick.
            self.latest_tick(_CHECK_TICKS_AT)
            self.next_tick(_CHECK_TICKS_AT)
        except (ValueError, OverflowError) as exc:  # CroniterBadDateError is a ValueError
            raise ScheduleError(f"{where}: 'cron' {self.cron!r} has no ticks ({exc})")
        if not isinstance(self.payload, dict):
            raise ScheduleError(f"{where}: 'payload' must be a JSON object")
        if not isinstance(self.queue, str) or not self.queue:
            raise ScheduleError(f"{where}: 'queue' must name a queue")
        if self.priority not in Priority.values:
            raise ScheduleError(f"{where}: 'priority' must be one of {', '.join(Priority.values)}")

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def interval(self) -> timedelta | None:
        if self.cron.startswith(EVERY_PREFIX):
            return parse_interval(self.cron.removeprefix(EVERY_PREFIX))
        return None

    @property
    def definition(self) -> str:
        """What places the ticks: when it changes, the ticks handled so far say nothing about the new ones."""
        interval = self.interval
        if interval is not None:
            return f"{EVERY_PREFIX} {int(interval.total_seconds())}s"
        return f"{' '.join(self.cron.lower().split())} {self.timezone}"

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after ``after`` (aware), in UTC."""
        interval = self.interval
        if interval is not None:
            elapsed = (after - _EPOCH) // interval
            return _EPOCH + (elapsed + 1) * interval
        return self._croniter(after).get_next(datetime).astimezone(UTC)

    def latest_tick(self, at: datetime) -> datetime:
        """The last tick at or before ``at`` (aware), in UTC."""
        interval = self.interval
        if interval is not None:
            return _EPOCH + ((at - _EPOCH) // interval) * interval
        previous = self._croniter(at).get_prev(datetime).astimezone(UTC)
        following = self.next_tick(previous)
        return following if following <= at else previous

    def _croniter(self, at: datetime) -> croniter:
        # Vixie cron's day rule: when day-of-month or day-of-week starts with "*",
        # a day must match both ("0 0 */2 * MON": odd-numbered Mondays), else either.
        return croniter(self.cron, at.astimezone(self.zone), implement_cron_bug=True)

    def idempotency_key(self, tick: datetime) -> str:
        """One job per schedule and tick, whichever scheduler enqueues it."""
        return f"schedule:{self.name}:{tick.astimezone(UTC).isoformat()}"


# Handlers decorated with @periodic, resolved to their job type when read, so
# that @periodic works above or below @job_handler.
_declared: list[tuple[Handler, dict[str, Any]]] = []


def periodic(
    cron: str,
    *,
    name: str | None = None,
    timezone: str = "UTC",
    payload: dict[str, Any] | None = None,
    queue: str = "default",
    priority: str = Priority.MEDIUM,
) -> Callable[[Handler], Handler]:
    """Run the decorated handler on a schedule (its name defaults to the job type)."""

    def declare(func: Handler) -> Handler:
        options = {
            "name": name,
            "cron": cron,
            "timezone": timezone,
            "payload": payload or {},
            "queue": queue,
            "priority": priority,
        }
        _declared.append((func, options))
        return func

    return declare


def _from_settings(raw: Any) -> list[Schedule]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"JOBQUEUE['SCHEDULES'] is not valid JSON: {exc}")
    if not isinstance(raw, dict):
        raise ScheduleError("JOBQUEUE['SCHEDULES'] must map schedule names to their options")
    schedules = []
    for name, options in raw.items():
        if not isinstance(options, dict):
            raise ScheduleError(f"schedule {name!r}: options must be a dict with 'type' and 'cron'")
        unknown = set(options) - _SCHEDULE_KEYS
        if unknown:
            raise ScheduleError(f"schedule {name!r}: unknown key(s) {', '.join(sorted(unknown))}")
        for required in ("type", "cron"):
            if required not in options:
                raise ScheduleError(f"schedule {name!r}: {required!r} is required")
        schedules.append(Schedule(name=name, **options))
    return schedules


def _from_decorators() -> list[Schedule]:
    type_of = {spec.func: spec.name for spec in registered_handlers()}
    schedules = []
    for func, options in _declared:
        job_type = type_of.get(func)
        if job_type is None:
            qualname = f"{func.__module__}.{func.__qualname__}"
            raise ScheduleError(f"@periodic on {qualname}, which is not registered with @job_handler")
        schedules.append(Schedule(type=job_type, **{**options, "name": options["name"] or job_type}))
    return schedules


def all_schedules() -> list[Schedule]:
    """Every declared schedule, by name; raises ScheduleError for a bad or repeated one."""
    from queue_app.conf import queue_settings

    schedules = _from_settings(queue_settings().SCHEDULES) + _from_decorators()
    seen: set[str] = set()
    for schedule in schedules:
        if schedule.name in seen:
            raise ScheduleError(f"schedule {schedule.name!r} is declared twice")
        seen.add(schedule.name)
    return sorted(schedules, key=lambda s: s.name)

"""What a running job reports while it runs: ``current_job().progress()`` and ``.log()``.

``current_job()`` returns a ``CurrentJob``: the claimed job (id, attempt, fence,
payload, ...) and the two ways its handler tells the job's owner how it is doing.
Every report is fenced (``engine/reports.py``): once the attempt no longer holds the
job, nothing is written and the call returns False. Reports are rate-limited per
attempt, so a tight loop cannot flood the job table:

- progress is written at most every ``PROGRESS_MIN_INTERVAL_SECONDS``; a report in
  between is kept, and the latest one kept is written by the next report past the
  interval or, at the latest, when the handler returns: the final value lands;
- at most ``JOB_LOG_LINES_PER_SECOND`` log lines are written per second; the rest are
  dropped, and one ``job_log_dropped`` row says how many, written with the next line
  or when the handler returns.

Inside a transaction (an atomic handler, or the handler's own ``transaction.atomic()``)
reports are kept, and written after it: a progress UPDATE there would hold the job's
row lock until the commit, and the heartbeat and a cancel need that row meanwhile;
a log line there would be lost with a rollback. An atomic handler's reports are
written in its completion's transaction.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection
from django.utils.asyncio import async_unsafe

from queue_app.conf import queue_settings
from queue_app.engine import reports as store
from queue_app.engine.execution import ClaimedJob, storable_text
from queue_app.engine.reports import LogLine
from queue_app.states import JOB_LOG, JOB_LOG_DROPPED

# A progress message and a log line are cut to this many characters.
MAX_MESSAGE_LENGTH = 2000
# A log line's fields, as JSON, past this size are kept only as their first characters.
MAX_FIELDS_LENGTH = 8192


class AttemptReports:
    """One attempt's reports: what its rate limits let through now, what they keep for later."""

    def __init__(self, job_id: str, fence: int) -> None:
        settings = queue_settings()
        self.job_id = job_id
        self.fence = fence
        self.interval = settings.PROGRESS_MIN_INTERVAL_SECONDS
        self.lines_per_second = settings.JOB_LOG_LINES_PER_SECOND
        # False once a write was refused: the attempt no longer holds the job.
        self.held = True
        self._lock = threading.Lock()
        self._progress: tuple[float, str] | None = None  # the latest report not written yet
        self._progress_written_at = -math.inf  # monotonic
        self._window_started_at = -math.inf  # monotonic: the log lines' current second
        self._window_lines = 0
        self._dropped = 0
        self._lines: list[LogLine] = []  # let through, not written yet (inside a transaction)

    def progress(self, fraction: float, message: str) -> bool:
        with self._lock:
            if not self.held:
                return False
            self._progress = (fraction, message)
            now = time.monotonic()
            if now - self._progress_written_at < self.interval or connection.in_atomic_block:
                return True
            return self._write_progress(now)

    def log(self, message: str, fields: dict[str, Any]) -> bool:
        with self._lock:
            if not self.held:
                return False
            now = time.monotonic()
            if now - self._window_started_at >= 1.0:
                self._window_started_at, self._window_lines = now, 0
            if self._window_lines >= self.lines_per_second:
                self._dropped += 1
                return True
            self._window_lines += 1
            self._note_dropped()
            self._lines.append(LogLine(JOB_LOG, "info", message, fields))
            if connection.in_atomic_block:
                return True
            return self._write_lines()

    def pending(self) -> bool:
        """Whether anything waits to be written."""
        with self._lock:
            return self.held and bool(self._progress or self._lines or self._dropped)

    def flush(self) -> bool:
        """Write what the rate limits and transactions kept (the handler has returned, or an
        atomic handler's completion is about to be written); False: the attempt no longer
        holds the job."""
        with self._lock:
            if not self.held:
                return False
            self._note_dropped()
            if self._progress is not None and not self._write_progress(time.monotonic()):
                return False
            return self._write_lines()

    # --- under the lock ---------------------------------------------------------------

    def _note_dropped(self) -> None:
        if self._dropped:
            message = f"{self._dropped} log lines dropped: more than {self.lines_per_second} a second"
            extra = {"dropped": self._dropped, "lines_per_second": self.lines_per_second}
            self._lines.append(LogLine(JOB_LOG_DROPPED, "warning", message, extra))
            self._dropped = 0

    def _write_progress(self, now: float) -> bool:
        assert self._progress is not None
        fraction, message = self._progress
        self._progress, self._progress_written_at = None, now
        self.held = store.write_progress(self.job_id, self.fence, fraction, message)
        return self.held

    def _write_lines(self) -> bool:
        lines, self._lines = self._lines, []
        self.held = store.write_log_lines(self.job_id, self.fence, lines)
        return self.held


_creating = threading.Lock()


def reports_of(attempt: Any) -> AttemptReports:
    """The reports of a held attempt (runtime.holdings.Attempt), made on its first report."""
    if attempt.reports is None:
        with _creating:
            if attempt.reports is None:
                attempt.reports = AttemptReports(attempt.job.id, attempt.job.fence)
    return attempt.reports


class CurrentJob:
    """The job the current handler call runs, as ``current_job()`` returns it: the claimed
    job's fields, and the handler's reports on how it is doing."""

    __slots__ = ("_attempt", "_job")

    def __init__(self, job: ClaimedJob, attempt: Any) -> None:
        self._job = job
        self._attempt = attempt

    @property
    def id(self) -> str:
        return self._job.id

    @property
    def type(self) -> str:
        return self._job.type

    @property
    def queue(self) -> str:
        return self._job.queue

    @property
    def payload(self) -> dict[str, Any]:
        return self._job.payload

    @property
    def attempt(self) -> int:
        """The attempt's number (1 for the first), as charged: a snooze or hand-back is not one."""
        return self._job.attempt

    def parent_results(self) -> dict[str, Any]:
        """The results of the jobs this one depends on (``ClaimedJob.parent_results``)."""
        return self._job.parent_results()

    @property
    def max_attempts(self) -> int:
        return self._job.max_attempts

    @property
    def fence(self) -> int:
        """The attempt's fencing token: every write made for it names this value."""
        return self._job.fence

    @property
    def trace_context(self) -> dict[str, str] | None:
        return self._job.trace_context

    @async_unsafe
    def progress(self, done: float, total: float | None = None, *, message: str = "") -> bool:
        """Report how far the job has come: ``progress(0.4)``, or ``progress(40, 100)``.

        The fraction must be within 0..1 and ``total`` above 0 (ValueError otherwise). Written
        at most every ``PROGRESS_MIN_INTERVAL_SECONDS``; a report in between is kept, and the
        latest one kept is written later, at the latest when the handler returns.

        Returns False when the attempt no longer holds the job (nothing is written, now or
        later), else True (written, or kept to be written). In a coroutine: ``aprogress``.
        """
        fraction = _fraction(done, total)
        return reports_of(self._held()).progress(fraction, _text(message, "message"))

    @async_unsafe
    def log(self, message: str, **fields: Any) -> bool:
        """Add a line to the job's log trail (event ``job_log``, level info, ``fields`` as its
        extra; values JSON cannot hold are written as their ``str()``).

        At most ``JOB_LOG_LINES_PER_SECOND`` lines a second are written; the rest are dropped
        and counted in one ``job_log_dropped`` row. Returns as ``progress`` does (a dropped
        line returns True). In a coroutine: ``alog``.
        """
        return reports_of(self._held()).log(_text(message, "message"), _fields(fields))

    async def aprogress(self, done: float, total: float | None = None, *, message: str = "") -> bool:
        """``progress`` for an ``async def`` handler or task."""
        return await sync_to_async(self.progress)(done, total, message=message)

    async def alog(self, message: str, **fields: Any) -> bool:
        """``log`` for an ``async def`` handler or task."""
        return await sync_to_async(self.log)(message, **fields)

    def _held(self) -> Any:
        if self._attempt is None:
            raise RuntimeError("progress and log lines need a handler run by a worker")
        return self._attempt

    def __repr__(self) -> str:
        return f"<CurrentJob {self.type} {self.id} attempt {self.attempt} fence {self.fence}>"


def _fraction(done: Any, total: Any) -> float:
    for name, value in (("done", done), ("total", total)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"progress: {name} must be a number, not {value!r}")
        if value is not None and not math.isfinite(value):
            raise ValueError(f"progress: {name} must be a finite number, not {value!r}")
    if total is not None and total <= 0:
        raise ValueError(f"progress: total must be greater than 0, not {total!r}")
    fraction = done / total if total is not None else done
    if not 0 <= fraction <= 1:
        what = f"done/total ({done!r}/{total!r})" if total is not None else f"the fraction ({done!r})"
        raise ValueError(f"progress: {what} must be between 0 and 1")
    return float(fraction)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, not {type(value).__name__}")
    return storable_text(value)[:MAX_MESSAGE_LENGTH]


def _fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields as PostgreSQL's jsonb keeps them: a value JSON cannot hold as its str(), a NUL
    as the text \\x00 (jsonb refuses \\u0000), NaN and infinities as their names."""
    value = _storable(json.loads(json.dumps(fields, default=str)))
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    if len(text) > MAX_FIELDS_LENGTH:
        return {"fields_truncated": text[:MAX_FIELDS_LENGTH]}
    return value


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {storable_text(key): _storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    return value

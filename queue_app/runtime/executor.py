"""The executor: runs one claimed attempt and settles it, wherever it runs.

The main thread, a slot thread and a slot coroutine differ only in how the
handler is called and interrupted (a ``Runner``); what an ending means is
decided here, once: a result is completed (batched in the main thread, written
at once in a slot), an exception fails the attempt (retried or not, with its
summary for the owner and its traceback kept apart), a stop the attempt was
asked for (``AttemptStopped``: cancel requested, lease lost) confirms the cancel
or writes nothing, a shutdown hands the job back, a ``Snooze`` the handler raised
puts the job back to wait, uncounted. Every write is fenced by the attempt's
token; an outcome the fence turns away confirms a pending cancel or is recorded
once. What the handler reported and its rate limits kept (queue_app/reports.py)
is written before its outcome.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import connection, transaction

from queue_app.conf import queue_settings
from queue_app.engine import execution
from queue_app.engine.execution import ClaimedJob, Completion
from queue_app.exceptions import (
    AttemptStopped,
    CancelRequested,
    JobTimeLimitExceeded,
    QueueError,
    Snooze,
    WorkerShutdown,
    failure_cause,
)
from queue_app.handlers import HandlerSpec, _current_attempt, _current_job, _soft_deadline, get_handler
from queue_app.observability.logs import get_logger
from queue_app.observability.runs import observed_run
from queue_app.payloads import check_result
from queue_app.runtime.holdings import Attempt, Holdings, lease_start_limit
from queue_app.runtime.outages import OutageGuard
from queue_app.states import COMPLETION_FENCED

log = get_logger(__name__)

# What an atomic handler's call returns: its completion is already written.
ALREADY_COMPLETED = object()


class Fenced(Exception):
    """Rolls back an atomic handler whose completion the fence rejected."""


class HandedBack(Exception):
    """The job goes back unrun: the worker cancelled a slot coroutine at shutdown, or
    could not be sure of the lease when the handler was to start."""


class Runner(Protocol):
    """How one kind of place runs a handler: the main thread, a slot thread, a coroutine."""

    def begin(self, attempt: Attempt, limit: float) -> None: ...

    def call(self, attempt: Attempt, spec: HandlerSpec, executor: Executor) -> Any: ...

    def end(self, attempt: Attempt) -> None: ...


@dataclass(frozen=True)
class Outcome:
    kind: str  # completed | rejected | stopped | handed_back | failed | snoozed
    result: Any = None
    summary: str = ""
    retry: bool = True
    # Seconds until the retry, when the handler's rules chose them (None: its backoff).
    delay: float | None = None
    error_class: str = ""
    traceback: str = ""
    # snoozed: how long the job waits before it runs again.
    snooze_seconds: float = 0.0


def failure(exc: BaseException, *, retry: bool, delay: float | None = None) -> Outcome:
    """An attempt the handler's exception ended: 'Type: message' for the owner, the traceback
    apart (a RetryAfter raised from an error records that error)."""
    cause = failure_cause(exc)
    return Outcome(
        "failed",
        summary=execution.error_summary(cause),
        retry=retry,
        delay=delay,
        error_class=execution.error_class_path(cause),
        traceback="".join(traceback.format_exception(exc)),
    )


def time_limit_failure(exc: JobTimeLimitExceeded) -> Outcome:
    return Outcome(
        "failed",
        summary=f"JobTimeLimitExceeded: {exc}",
        retry=True,
        error_class="queue_app.exceptions.JobTimeLimitExceeded",
    )


class Executor:
    def __init__(
        self,
        *,
        worker_id: str,
        holdings: Holdings,
        before_hand_back: Callable[[], None] = lambda: None,
    ) -> None:
        self.worker_id = worker_id
        self.holdings = holdings
        # Pending acknowledgements go out before a hand-back (see Producer.acknowledge_now).
        self.before_hand_back = before_hand_back

    def run(self, attempt: Attempt, runner: Runner, *, late: bool = False, batch: bool = False) -> float:
        """Run ``attempt`` with ``runner`` and settle it; returns the seconds it took.

        ``late``: it starts noticeably after its claim, so started_at is set again.
        ``batch``: a completion waits in the holdings for the next claim's commit.
        Store errors while settling propagate, with the attempt no longer held (its
        lease runs out and the rescue counts the attempt).
        """
        started = time.monotonic()
        self._observed_run(attempt.job, attempt=attempt, runner=runner, late=late, batch=batch)
        return time.monotonic() - started

    @observed_run
    def _observed_run(
        self, job: ClaimedJob, *, attempt: Attempt, runner: Runner, late: bool, batch: bool
    ) -> None:
        if attempt.stop is not None:
            # Asked to stop before it started (a cancel, a lost lease): it never runs.
            self.settle(attempt, Outcome("stopped"))
            return
        try:
            spec = get_handler(job.type)
        except QueueError as exc:
            self.settle(
                attempt,
                Outcome(
                    "failed",
                    summary=execution.error_summary(exc),
                    retry=False,
                    error_class=execution.error_class_path(exc),
                ),
            )
            return
        if late:
            record_late_start(job)
        limit = spec.time_limit or queue_settings().DEFAULT_TIME_LIMIT_SECONDS
        log.debug("job_started", job_id=job.id, type=job.type, attempt=job.attempt, worker=self.worker_id)
        outcome = self._outcome(attempt, spec, runner, limit)
        if attempt.stop is not None and outcome.kind != "handed_back":
            # However the handler ended (it may have caught the stop and carried on), the
            # attempt was asked to stop: a cancel is confirmed, a lost lease writes nothing.
            outcome = Outcome("stopped")
        self.settle(attempt, outcome, batch=batch)

    def _outcome(self, attempt: Attempt, spec: HandlerSpec, runner: Runner, limit: float) -> Outcome:
        job = attempt.job
        tokens = (_current_job.set(job), _current_attempt.set(attempt))
        runner.begin(attempt, limit)
        deadline_token = _soft_deadline.set(time.monotonic() + limit)
        try:
            try:
                check_lease_before_start(attempt)
                result = runner.call(attempt, spec, self)
            finally:
                runner.end(attempt)
                write_kept_reports(attempt)
        except Fenced:
            return Outcome("rejected")
        except AttemptStopped:
            return Outcome("stopped")
        except WorkerShutdown:
            return Outcome("handed_back", summary="worker shutdown grace period ended")
        except HandedBack as exc:
            return Outcome("handed_back", summary=str(exc))
        except Snooze as exc:
            return Outcome("snoozed", snooze_seconds=exc.seconds)
        except JobTimeLimitExceeded as exc:
            return time_limit_failure(exc)
        except (concurrent.futures.CancelledError, asyncio.CancelledError) as exc:
            if attempt.stop is not None:
                return Outcome("stopped")
            # The handler's own (a task it awaited was cancelled): its failure, counted.
            # Handed back, it would be claimed and run again at once, forever.
            return failure(exc, retry=True)
        except BaseException as exc:  # noqa: BLE001 - however a handler ends, the attempt counts
            # SystemExit, KeyboardInterrupt and GeneratorExit raised by a handler are its
            # failure too: letting them end the process would hand the job back uncounted,
            # to be claimed again forever (a poison job). The handler's retry rules decide.
            retry, delay = execution.failure_policy(spec, exc, job.attempt)
            return failure(exc, retry=retry, delay=delay)
        finally:
            _soft_deadline.reset(deadline_token)
            _current_attempt.reset(tokens[1])
            _current_job.reset(tokens[0])
        return Outcome("completed", result=result)

    def call_sync(
        self, attempt: Attempt, spec: HandlerSpec, *, returned: Callable[[], None] = lambda: None
    ) -> Any:
        """Call a sync handler; ``returned`` runs the moment it returns (the main thread
        disarms its timer). An atomic handler's writes commit with its completion."""
        job = attempt.job
        if not spec.atomic:
            result = spec.func(dict(job.payload))
            returned()
            check_result(result)
            return result
        with transaction.atomic():
            result = spec.func(dict(job.payload))
            returned()
            check_result(result)
            if attempt.reports is not None:
                # In the completion's transaction: written after it, they would find the job done.
                attempt.reports.flush()
            if not execution.complete_jobs([Completion(job.id, job.fence, result)], settle_rejected=False):
                raise Fenced()
        return ALREADY_COMPLETED

    # --- settling -------------------------------------------------------------

    def settle(self, attempt: Attempt, outcome: Outcome, *, batch: bool = False) -> None:
        """Write the attempt's outcome, fenced by its token; then it is no longer held.

        A batched completion stays held (its lease extended) until the claim that writes it.
        """
        job = attempt.job
        if outcome.kind == "completed" and batch and outcome.result is not ALREADY_COMPLETED:
            # Written with the next claim (or sooner: see Worker.release_batch).
            self.holdings.add_completion(attempt, Completion(job.id, job.fence, outcome.result))
            return
        attempt.settling = True
        try:
            if outcome.kind == "completed":
                if outcome.result is not ALREADY_COMPLETED:
                    with transaction.atomic():
                        execution.complete_jobs([Completion(job.id, job.fence, outcome.result)])
            elif outcome.kind == "rejected":
                execution.settle_rejected_attempts([attempt.key], COMPLETION_FENCED)
            elif outcome.kind == "stopped":
                self._stopped(attempt)
            elif outcome.kind == "handed_back":
                start_from_a_usable_connection()
                self.hand_back(attempt, outcome.summary)
            elif outcome.kind == "snoozed":
                start_from_a_usable_connection()
                self.before_hand_back()  # due again at once (0 s), it may be popped again
                execution.snooze_job(job.id, job.fence, outcome.snooze_seconds)
            else:
                start_from_a_usable_connection()
                execution.fail_job(
                    job.id,
                    job.fence,
                    outcome.summary,
                    retry=outcome.retry,
                    delay=outcome.delay,
                    error_class=outcome.error_class,
                    traceback=outcome.traceback,
                )
        finally:
            self.holdings.settled(attempt)

    def _stopped(self, attempt: Attempt) -> None:
        job = attempt.job
        if attempt.stop is CancelRequested:
            start_from_a_usable_connection()
            if execution.confirm_cancel(job.id, job.fence):
                return
        # The lease went to a rescue or a later claim: nothing of this attempt is written.
        log.warning("job_lease_lost", job_id=job.id, attempt=job.attempt, fence=job.fence)

    def hand_back(self, attempt: Attempt, reason: str) -> None:
        """Return the job unrun (the attempt is not counted); a job asked to cancel is
        cancelled instead. Pending acknowledgements go first: once handed back, the id
        may be popped again."""
        self.before_hand_back()
        execution.hand_back_job(attempt.job.id, attempt.job.fence, worker_id=self.worker_id, reason=reason)
        self.holdings.settled(attempt)


def check_lease_before_start(attempt: Attempt) -> None:
    """The last check before the handler is called, on this process's clock alone.

    The worker confirmed the lease before it took the attempt up, but a process can
    be frozen anywhere after that (a SIGSTOP, a stall in a store call on the way
    here) for longer than the lease, and wake with its job rescued and claimed by
    another worker, before its heartbeat has run to say so. Too old a confirmation
    hands the job back unrun (fenced: a no-op if it was rescued) rather than race
    the heartbeat. What is left is a freeze between this line and the handler's.
    """
    age = attempt.lease_age()
    if age >= lease_start_limit():
        raise HandedBack(f"not started: its lease was last confirmed {age:.1f} s before, too long ago")


def write_kept_reports(attempt: Attempt) -> None:
    """The handler has returned: write the progress and log lines its rate limits (or a
    transaction) kept, before its outcome. Best effort: a store error here is logged, and
    the outcome is still written (or fails) as it would have."""
    if attempt.reports is None or not attempt.reports.pending():
        return
    try:
        start_from_a_usable_connection()
        attempt.reports.flush()
    except Exception as exc:  # noqa: BLE001 - the outcome matters more than the last report
        log.warning("job_reports_not_written", job_id=attempt.job.id, error=str(exc)[:300])


def record_late_start(job: ClaimedJob) -> None:
    """started_at is a job's start, not its claim. Best effort: with PostgreSQL unreachable
    the job runs anyway (its claim is committed, its completion waits for the store), where
    failing here would drop it to wait out its lease and be charged an attempt it never
    had; started_at then stays at the claim."""
    try:
        execution.mark_started(job.id, job.fence)
    except OutageGuard.errors as exc:
        log.warning("job_start_time_not_recorded", job_id=job.id, error=str(exc)[:300])
        connection.close()  # the next query connects afresh, not through the broken one


def start_from_a_usable_connection() -> None:
    """The handler may have closed or broken this thread's connection, or been stopped
    inside a query: its connection still busy, the query still running on the server."""
    raw = connection.connection
    if raw is None or connection.is_usable():
        return
    with contextlib.suppress(Exception):  # a broken connection has no query to cancel
        raw.cancel_safe(timeout=2)  # the server stops it instead of finishing it for no one
    connection.close()

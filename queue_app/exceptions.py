"""The errors application code may catch: one base class, each with a machine-readable code.

A domain error says what went wrong (``code``) and which input it concerns
(``field``; ``index`` for a job of an ``enqueue_jobs`` call), never how to
answer over HTTP: the API maps codes to statuses (queue_app/api/errors.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta

from queue_app.conf import MAX_SECONDS


class QueueError(Exception):
    code = "queue_error"

    def __init__(self, message: str, *, field: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.index = index


class UnknownJobType(QueueError):
    code = "unknown_type"


class InvalidJob(QueueError):
    code = "invalid"


class PayloadTooLarge(QueueError):
    code = "payload_too_large"


class JobNotFound(QueueError):
    code = "not_found"


class TransitionNotAllowed(QueueError):
    """The job's status does not allow this transition (e.g. cancel a finished job)."""

    code = "conflict"


class IdempotencyConflict(QueueError):
    """The key was used with a different request (keys are per owner)."""

    code = "idempotency_key_reused"


class JobsRejected(QueueError):
    """Jobs of one ``enqueue_jobs`` call broke a rule, so none was created.

    ``errors`` holds one error per job at fault, each with its ``index`` in
    the call and its ``field``, so a caller can name every one.
    """

    code = "jobs_rejected"

    def __init__(self, errors: Sequence[QueueError], *, total: int) -> None:
        self.errors = list(errors)
        self.total = total
        super().__init__(f"Rejected {len(self.errors)} of {total} jobs; none was created.")


class JobTimeLimitExceeded(Exception):
    """Raised inside a handler when its soft time limit passes."""


# The longest delay a RetryAfter may ask for (ten years, as any JOBQUEUE *_SECONDS value).
RETRY_AFTER_MAX_SECONDS = 10 * 365 * 24 * 3600


class RetryAfter(Exception):
    """Raised by a handler to have this attempt retried after ``seconds`` (a number or a
    timedelta), whatever its backoff says: ``raise RetryAfter(30) from exc``.

    The attempt is still charged: with none left the job fails. Raised ``from`` an error,
    the job records that error (its class and message) as the failure.
    """

    def __init__(self, seconds: float | timedelta, message: str = "") -> None:
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(f"RetryAfter needs a number of seconds, not {type(seconds).__name__}")
        if not math.isfinite(seconds) or not 0 <= seconds <= RETRY_AFTER_MAX_SECONDS:
            raise ValueError(f"RetryAfter seconds must be from 0 to {RETRY_AFTER_MAX_SECONDS}, not {seconds}")
        self.seconds = float(seconds)
        super().__init__(message or f"retry in {self.seconds:g} s")


def failure_cause(exc: BaseException) -> BaseException:
    """The exception a failed attempt is recorded as: a RetryAfter raised from an error
    is that error's retry, so the error is what the job's owner reads."""
    if isinstance(exc, RetryAfter) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


class AttemptStopped(BaseException):
    """Raised inside a handler whose attempt must stop now.

    A BaseException, so a handler's ``except Exception`` (log and go on) cannot
    swallow it and run on beside the job's next attempt.
    """


class LeaseLost(AttemptStopped):
    """Raised inside a handler whose job was rescued or re-claimed while it ran."""


class CancelRequested(AttemptStopped):
    """Raised inside a handler whose job was asked to cancel while it ran: once the
    attempt has stopped, its worker confirms the cancel (the job becomes cancelled)."""


class Snooze(Exception):  # noqa: N818 - named for what the handler asks, as Celery's Retry
    """Raised by a handler to put its job back to wait ``seconds`` (a number or a timedelta)
    before it runs again, its attempt not charged (``JOBQUEUE['MAX_SNOOZES']`` bounds how
    often a job may).

    A bad ``seconds`` (negative, not finite, more than ten years) raises ValueError where the
    handler makes the exception: that attempt fails with it, as with any other error.
    """

    def __init__(self, seconds: float | timedelta) -> None:
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"Snooze: seconds must be a number or a timedelta, not {seconds!r}")
        if not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
            raise ValueError(f"Snooze: seconds must be between 0 and {MAX_SECONDS}, not {seconds!r}")
        super().__init__(f"snoozed for {seconds:g} s")
        self.seconds = float(seconds)


class SnoozeLimitExceeded(Exception):
    """What an attempt fails with when its job asked to snooze once more than
    ``JOBQUEUE['MAX_SNOOZES']`` allows: the job fails for good."""


class JobCancelled(Exception):
    """What a cancelled job reads as to django.tasks: a failure whose cause was a cancel."""


class JobExpired(Exception):
    """What an expired job reads as to django.tasks: a failure whose cause was its expiry."""


class WorkerProcessDied(Exception):
    """What an attempt fails with when the process running it died (killed, crashed, or found
    dead by its restarted worker): nothing inside the handler raised, so this names the cause."""


class WorkerShutdown(BaseException):
    """Raised inside a handler still running when the shutdown grace period ends."""


class UnknownQueue(QueueError):
    """The name is not one of JOBQUEUE['QUEUES']."""

    code = "unknown_queue"


class InvalidQueueControl(QueueError):
    """A queue control value is out of range (``field`` names it)."""

    code = "invalid"


class DependencyFailed(Exception):
    """What a job cancelled because a dependency failed or was cancelled records as its
    error class (``last_error`` names the dependency)."""


class InvalidWorkflow(QueueError):
    """A workflow or a set of dependencies breaks a rule (a cycle, an unknown or foreign
    dependency, too many steps); ``field`` names what, ``step`` the step at fault."""

    code = "invalid_workflow"

    def __init__(self, message: str, *, step: str | None = None, field: str | None = "depends_on") -> None:
        super().__init__(message, field=field)
        self.step = step


class WorkflowNotFound(QueueError):
    code = "not_found"

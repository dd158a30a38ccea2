"""The exceptions of ``celery.exceptions`` that task code raises or catches, mapped to the queue's.

``from celery.exceptions import SoftTimeLimitExceeded`` becomes
``from queue_app.contrib.celery.exceptions import SoftTimeLimitExceeded``.
"""

from __future__ import annotations

from datetime import timedelta

from queue_app.exceptions import JobTimeLimitExceeded, RetryAfter

# A task's soft time limit passed: the queue's own exception, so either name catches it.
SoftTimeLimitExceeded = JobTimeLimitExceeded
# Celery raises this in no task (its hard limit kills the process), and neither does the queue.
TimeLimitExceeded = JobTimeLimitExceeded


class CeleryError(Exception):
    """Base of the errors this module adds (as Celery's)."""


class Retry(RetryAfter):
    """What ``Task.retry`` raises: the queue's RetryAfter, so the attempt runs again after
    ``when`` seconds. ``exc`` is the error that caused it (also its ``__cause__``)."""

    def __init__(self, when: float | timedelta, exc: BaseException | None = None, message: str = "") -> None:
        super().__init__(when, message)
        if not message:
            self.args = (f"Retry in {self.seconds:g}s" + (f": {exc!r}" if exc is not None else ""),)
        self.exc = exc
        self.when = self.seconds


class MaxRetriesExceededError(CeleryError):
    """``Task.retry`` was called with no retry left and no ``exc`` to re-raise."""


class TaskError(CeleryError):
    """A failure whose exception ``AsyncResult`` cannot rebuild (its class is gone, or needs
    other arguments than a message): it carries the recorded 'ExceptionType: message'."""


class TaskRevokedError(CeleryError):
    """The task was cancelled, or reached its ``expires`` time before it started."""


class TimeoutError(CeleryError):  # Celery's name, so ``except TimeoutError`` ports as is
    """``AsyncResult.get(timeout=...)`` waited that long and the task was still not ready."""


class NotRegistered(CeleryError, KeyError):
    """``send_task`` named a task no module of this process registered."""

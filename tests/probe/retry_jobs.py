"""Probe handlers for the retry rules: retry_on, each backoff, and RetryAfter.

Each records its executions (``Execution`` rows), so tests count attempts.
"""

import os

from asgiref.sync import sync_to_async
from django.tasks import task

from queue_app.exceptions import RetryAfter
from queue_app.handlers import current_job, job_handler
from tests.probe.models import Execution

_ERRORS = {"connection": ConnectionError, "timeout": TimeoutError, "value": ValueError}


def _started() -> int:
    job = current_job()
    Execution.objects.create(job_id=job.id, attempt=job.attempt, pid=os.getpid())
    return job.attempt


@job_handler(
    "probe.retry_on",
    max_attempts=3,
    retry_on=(ConnectionError,),
    give_up_on=(ConnectionRefusedError,),
    backoff="fixed",
    retry_backoff_base=0.1,
)
def retry_on(payload):
    """Raises ``payload["raise"]``: only connection errors are retried, but not a refused one."""
    _started()
    if payload["raise"] == "refused":
        raise ConnectionRefusedError("probe refused")
    raise _ERRORS[payload["raise"]](f"probe {payload['raise']} error")


@job_handler("probe.linear", max_attempts=4, backoff="linear", retry_backoff_base=0.2, retry_backoff_max=0.5)
def linear(payload):
    """Always fails: waits 0.2, 0.4, then 0.6 capped at 0.5 s."""
    _started()
    raise RuntimeError("probe linear failure")


@job_handler("probe.fixed", max_attempts=3, backoff="fixed", retry_backoff_base=0.3)
def fixed(payload):
    """Always fails: waits 0.3 s before each retry."""
    _started()
    raise RuntimeError("probe fixed failure")


def _own_backoff(attempt: int, exc: BaseException | None) -> float:
    """0.1 s per attempt, plus 0.25 s after a timeout: the exception reaches the function."""
    return 0.1 * attempt + (0.25 if isinstance(exc, TimeoutError) else 0)


@job_handler("probe.own_backoff", max_attempts=3, backoff=_own_backoff)
def own_backoff(payload):
    """Raises ``payload["raise"]`` on every attempt; its backoff function picks the wait."""
    _started()
    raise _ERRORS[payload["raise"]]("probe own backoff failure")


def _broken_backoff(attempt: int, exc: BaseException | None) -> float:
    return float("nan")


@job_handler(
    "probe.broken_backoff",
    max_attempts=2,
    backoff=_broken_backoff,
    retry_backoff_base=0.1,
    retry_backoff_max=0.1,
)
def broken_backoff(payload):
    """Its backoff function answers NaN: the default backoff stands in, the job still retries."""
    _started()
    raise RuntimeError("probe broken backoff failure")


@job_handler(
    "probe.retry_after",
    max_attempts=3,
    # Neither stands in RetryAfter's way: it decides alone.
    give_up_on=(Exception,),
    retry_backoff_base=3600,
)
def retry_after(payload):
    """Asks for a retry after ``payload["after"]`` seconds on its first ``payload["fail_first"]``
    attempts (all when absent), raised from a ConnectionError; then returns its attempt."""
    attempt = _started()
    if attempt <= payload.get("fail_first", 99):
        try:
            raise ConnectionError("probe service busy")
        except ConnectionError as exc:
            raise RetryAfter(payload["after"]) from exc
    return {"attempt": attempt}


@job_handler("probe.async_retry_after", max_attempts=2, give_up_on=(Exception,), retry_backoff_base=3600)
async def async_retry_after(payload):
    """A coroutine (a slot job with --slots) that asks for a retry after ``payload["after"]`` s
    on its first attempt, without a cause, then returns its attempt."""
    attempt = await sync_to_async(_started)()
    if attempt == 1:
        raise RetryAfter(payload["after"])
    return {"attempt": attempt}


@task(max_attempts=3)
def task_retry_after(after: float) -> int:
    """A django.tasks task that asks for one retry after ``after`` seconds, then succeeds."""
    attempt = _started()
    if attempt == 1:
        raise RetryAfter(after, "rate limited")
    return attempt

"""Handlers the testing helpers' tests run: each shows one thing a test of a handler needs."""

import os

from django.db import connection

from queue_app.handlers import current_job, job_handler
from queue_app.services import cancel_job, enqueue_job
from tests.probe.models import Effect, Execution


def _record() -> None:
    job = current_job()
    Execution.objects.create(job_id=job.id, attempt=job.attempt, pid=os.getpid())


@job_handler("testing.countdown")
def countdown(payload):
    """Enqueues the next step until ``left`` reaches 0: jobs enqueued by jobs."""
    left = payload["left"]
    if left:
        enqueue_job("testing.countdown", {"left": left - 1})
    return {"left": left}


@job_handler("testing.atomic_then_fail", atomic=True, max_attempts=1)
def atomic_then_fail(payload):
    """Writes in its completion transaction, then fails: the write must go with it."""
    job = current_job()
    Effect.objects.create(job_id=job.id, attempt=job.attempt)
    raise RuntimeError("failed after writing")


@job_handler("testing.cancel_self")
def cancel_self(payload):
    """Asks to cancel its own job while it runs, then returns."""
    _record()
    cancel_job(current_job().id)
    return {"finished": True}


@job_handler("testing.failed_statement", max_attempts=2, retry_backoff_base=0.1, retry_backoff_max=0.1)
def failed_statement(payload):
    """Writes, then runs a statement PostgreSQL refuses (and does not catch the error)."""
    _record()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 / 0")


@job_handler("testing.caught_failed_statement")
def caught_failed_statement(payload):
    """Runs a statement PostgreSQL refuses, catches the error and returns."""
    from django.db import DataError

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")
    except DataError:
        return {"caught": True}
    return {"caught": False}

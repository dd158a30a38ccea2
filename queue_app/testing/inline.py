"""Running queued jobs inside a test: in its process, its thread and its transaction.

What Oban's ``drain_queue`` / ``perform_job`` and Celery's eager mode give a test, with
nothing replaced: each job goes through the real claim (``execution.claim`` by id),
the real executor (``Executor.run``) and the real completion, failure, retry and
cancel confirmation, against PostgreSQL. No Redis, relay or worker process takes
part: which job runs next is read from PostgreSQL, in the order a worker pops.

Inside a test's transaction (``TestCase``, ``pytest.mark.django_db``) the claim and
the outcome are written in that transaction and nothing commits; an atomic
handler's block is a savepoint there. With transactional tests each statement
commits, as in a worker.

What a worker does and this does not: time limits are not enforced (the handler
runs in the caller's thread, with no timer or signal; ``check_time_limit()`` still
raises past the limit), no heartbeat extends the lease, and a cancel asked for while
a handler runs is confirmed when the handler returns, not by interrupting it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.db.models import DateTimeField, Func, Q

from queue_app.conf import queue_settings
from queue_app.engine import execution
from queue_app.exceptions import JobNotFound, TransitionNotAllowed, UnknownQueue
from queue_app.handlers import HandlerSpec
from queue_app.ids import parse_job_id
from queue_app.models import Job
from queue_app.payloads import check_result
from queue_app.runtime.executor import Executor
from queue_app.runtime.holdings import Attempt, Holdings
from queue_app.states import Status

# The worker name the claims record (job logs, django.tasks' worker_ids).
INLINE_WORKER_ID = "inline"

# How each status an attempt can leave its job in is counted.
_OUTCOMES = {
    Status.COMPLETED: "completed",
    Status.FAILED: "failed",
    Status.QUEUED: "retried",
    Status.CANCELLED: "cancelled",
    Status.EXPIRED: "expired",
}


@dataclass(frozen=True)
class RunSummary:
    """How the attempts of a ``run_jobs`` call ended, as Oban's ``drain_queue`` counts them.

    ``retried``: failed with attempts left, queued again after its backoff.
    ``cancelled``: cancelled while it ran (the cancel is confirmed as the attempt ends).
    """

    completed: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0

    @property
    def ran(self) -> int:
        """Every attempt run, whatever its outcome."""
        return self.completed + self.failed + self.retried + self.cancelled


class _TransactionNow(Func):
    """PostgreSQL's ``now()``: the transaction's start, the clock the claim compares with
    (Django's ``Now()`` is the statement's)."""

    template = "now()"
    output_field = DateTimeField()


def run_jobs(
    queue: str | Sequence[str] | None = None,
    *,
    with_scheduled: bool = False,
    max_jobs: int | None = None,
) -> RunSummary:
    """Run queued jobs here, one at a time, until none is left to run; count the outcomes.

    ``queue``: a queue name or several (default: every queue). Only jobs due now run
    unless ``with_scheduled``, which runs jobs scheduled later and retries waiting out
    their backoff as if due (as Oban's ``drain_queue(with_scheduled: true)``): a failing
    job then runs until its attempts are used up. Jobs the handlers enqueue run too.
    ``max_jobs`` bounds the attempts run (a job that keeps enqueuing more would not end).
    A paused queue's jobs, and those its limits hold back, stay queued, as with a worker.

    Example:
        ```python
        enqueue_job("sync_account", {"account": 7})  # 3 attempts; fails every time
        assert run_jobs() == RunSummary(retried=1)  # its retry waits out the backoff
        assert run_jobs(with_scheduled=True) == RunSummary(retried=1, failed=1)
        ```
    """
    queues = _checked_queues(queue)
    executor = _executor()
    counts: Counter[str] = Counter()
    held_back: set[UUID] = set()
    while max_jobs is None or counts.total() < max_jobs:
        job_id = _next_job(queues, with_scheduled=with_scheduled, skip=held_back)
        if job_id is None:
            break
        outcome = _run_one(executor, job_id, make_due=with_scheduled)
        if outcome is None:
            held_back.add(job_id)  # the claim turned it down: its queue's controls
        else:
            counts[outcome] += 1
    return RunSummary(**counts)


def perform_job(job_or_id: Job | UUID | str) -> Job:
    """Run this one queued job now, scheduled or not; returns the job as its attempt left it.

    Raises ``JobNotFound`` for an id that names no job, and ``TransitionNotAllowed`` for
    a job that is not queued or that its queue's controls hold back (paused, full).

    Example:
        ```python
        job = enqueue_job("send_invoice", {"order": 42}, run_at=tomorrow)
        assert perform_job(job).status == "completed"
        ```
    """
    job_id = parse_job_id(getattr(job_or_id, "pk", job_or_id))
    if job_id is None or not Job.objects.filter(id=job_id).exists():
        raise JobNotFound(f"no job {job_or_id}")
    if _run_one(_executor(), job_id, make_due=True) is None:
        job = Job.objects.get(id=job_id)
        if job.status != Status.QUEUED:
            raise TransitionNotAllowed(f"job {job_id} is {job.status}: only a queued job can run")
        raise TransitionNotAllowed(f"job {job_id} is held back by the controls of queue {job.queue!r}")
    return Job.objects.get(id=job_id)


def _checked_queues(queue: str | Sequence[str] | None) -> list[str] | None:
    if queue is None:
        return None
    names = [queue] if isinstance(queue, str) else list(queue)
    configured = queue_settings().QUEUES
    for name in names:
        if name not in configured:
            raise UnknownQueue(f"{name!r} is not one of {', '.join(configured)}", field="queue")
    return names


def _executor() -> Executor:
    return Executor(worker_id=INLINE_WORKER_ID, holdings=Holdings())


def _next_job(queues: list[str] | None, *, with_scheduled: bool, skip: set[UUID]) -> UUID | None:
    """The queued job a worker would pop first: highest priority, then longest ready."""
    jobs = Job.objects.filter(status=Status.QUEUED).exclude(id__in=skip)
    if queues is not None:
        jobs = jobs.filter(queue__in=queues)
    if not with_scheduled:
        jobs = jobs.filter(Q(next_retry_at__isnull=True) | Q(next_retry_at__lte=_TransactionNow()))
    return jobs.order_by("-priority_value", "enqueued_at", "id").values_list("id", flat=True).first()


def _run_one(executor: Executor, job_id: UUID, *, make_due: bool) -> str | None:
    """Claim the job and run its attempt through the executor; the outcome's name, or None
    when the claim took nothing (not queued, not due, or held back by its queue)."""
    if make_due:
        # Not a transition: the job stays queued, only its start moves to now, which the
        # claim compares with (inside a test's transaction, the clock stands still).
        Job.objects.filter(id=job_id, status=Status.QUEUED, next_retry_at__gt=_TransactionNow()).update(
            next_retry_at=_TransactionNow()
        )
    claim = execution.claim([str(job_id)], worker_id=INLINE_WORKER_ID)
    if not claim.jobs:
        return None
    (attempt,) = executor.holdings.claimed(claim.jobs)
    executor.run(attempt, InlineRunner())
    status = Job.objects.filter(id=job_id).values_list("status", flat=True).get()
    return _OUTCOMES[status]


class InlineRunner:
    """Calls the handler in the calling thread: a sync one through ``Executor.call_sync``
    (an atomic one in its transaction), an async one on an event loop of its own; no timer,
    no signal, no slot."""

    def begin(self, attempt: Attempt, limit: float) -> None:
        pass

    def call(self, attempt: Attempt, spec: HandlerSpec, executor: Executor) -> Any:
        with _transaction_kept_usable():
            if not spec.is_async:
                return executor.call_sync(attempt, spec)
            # async_to_sync rather than asyncio.run: the handler's sync_to_async calls come
            # back to this thread, so its queries use this connection (the test's transaction).
            result = async_to_sync(spec.func)(dict(attempt.job.payload))
            check_result(result)
            return result

    def end(self, attempt: Attempt) -> None:
        pass


@contextlib.contextmanager
def _transaction_kept_usable() -> Iterator[None]:
    """Inside a caller's transaction, a handler's failed statement would abort it, and with
    it the test and the attempt's own outcome. A worker's handler runs in autocommit, where
    a failed statement undoes only itself; the nearest here is a savepoint, rolled back
    only when the transaction was left aborted (the handler's other writes then go too)."""
    if not connection.in_atomic_block:
        yield
        return
    savepoint = transaction.savepoint_create()
    try:
        yield
    finally:
        if connection.connection is not None:  # a handler that closed it has lost the transaction
            if connection.needs_rollback or _aborted():
                transaction.savepoint_rollback(savepoint)
                transaction.set_rollback(False)
            else:
                transaction.savepoint_commit(savepoint)


def _aborted() -> bool:
    return connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.INERROR

"""Running jobs: the claim, completions, failures and leases, fenced by ``queue_app_jobs.fence``.

``fence`` goes up by one on every claim and never down; ``attempts`` counts the
claims charged to the job (a hand-back takes one back). Every write made for a
running attempt is conditional on the fence value its claim returned.

Over 500 lines on purpose: every write made for a running attempt (claim, completion,
failure, snooze, hand-back, lease, rescue) shares the fence rules and the settling of an
outcome the fence turned away (``settle_rejected_attempts``); apart, each would reach
into the others' private steps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from queue_app.conf import queue_settings
from queue_app.engine import selectors, sql
from queue_app.engine.controls import KEY_LOCK_CLASS, QUEUE_LOCK_CLASS
from queue_app.engine.released import push_released
from queue_app.engine.retry_policy import backoff_delay, failure_policy  # noqa: F401 - the runtime's
from queue_app.engine.transitions import (
    TransitionedJob,
    apply_transition,
    record_transitions,
    settle_dependents,
    settle_params,
    table_params,
    transition,
    transitioned,
)
from queue_app.exceptions import failure_cause
from queue_app.handlers import get_handler
from queue_app.models import Job, JobLog
from queue_app.observability import metrics, tracing
from queue_app.observability.logs import get_logger
from queue_app.states import (
    COMPLETION_FENCED,
    FAILURE_FENCED,
    HEARTBEAT_FENCED,
    RUNNING,
    SNOOZE_FENCED,
    Status,
    Transition,
)

log = get_logger(__name__)


@dataclass(frozen=True)
class ClaimedJob:
    id: str
    type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    fence: int
    # The trace context stored at enqueue (observability/tracing.py), or None.
    trace_context: dict[str, str] | None = None

    def parent_results(self) -> dict[str, Any]:
        """The results of the jobs this one depends on, in their order, each under its step
        name (or its job id outside a workflow): a chord callback's values are the group's
        results, in group order."""
        from queue_app.engine.workflows import parent_results

        return parent_results(self.id)


@dataclass(frozen=True)
class Claim:
    """What a claim took, and the queued ids its queue's controls held back (paused, full
    or out of rate tokens): the caller puts those back in line."""

    jobs: list[ClaimedJob]
    held_back: dict[str, list[str]]  # queue -> ids, in pop order
    # Of those, the ids held back by their concurrency key's limits (not their queue's).
    held_by_key: frozenset[str] = frozenset()


# The claim settles an expired id it pops (claim_v5.sql): bound from the table like its own.
_EXPIRE_PARAMS = {
    "expire_target": transition("expire").target,
    "expire_event": transition("expire").event,
    "expire_level": transition("expire").level,
}


@tracing.traced("jobqueue.claim")
def claim(
    ids: Sequence[str],
    *,
    worker_id: str,
    queues: dict[str, bool] | None = None,
    completions: Sequence[Completion] = (),
) -> Claim:
    """Claim popped ids, honouring their queues' controls (pause, concurrency and rate limits).

    ``queues``: the queues of the ids -> whether the caller believes the queue
    has a limit (its claims then take the queue's lock exclusively); looked up
    when not given. A limited queue the caller did not know about gets nothing
    this time (its ids come back as held back). Two workers claiming one id: the
    second UPDATE waits for the first's row lock, re-checks ``status = 'queued'``
    and skips the row.

    ``completions`` (the caller's previous jobs) are written in the same
    transaction, as ``complete_jobs`` would (a fenced one's log row is written
    just after). The statements and the commit go out together
    (``sql.one_round_trip``).
    """
    if not ids:
        complete_jobs(completions)
        return Claim([], {})
    metrics.prepare()
    lease = queue_settings().LEASE_SECONDS
    valid_ids = [str(pk) for pk in selectors.valid_ids(ids)]
    with sql.prepared() as done_cursor, sql.prepared() as settle_cursor, sql.prepared() as cursor:
        if queues is None:
            cursor.execute(sql.query("claim_queues"), {"ids": valid_ids})
            queues = dict(cursor.fetchall())
        names = sorted(queues)
        claim_params = {
            "ids": valid_ids,
            "worker": worker_id,
            "lease": lease,
            "queues": names,
            "exclusive": [queues[name] for name in names],
            "lock_class": QUEUE_LOCK_CLASS,
            **table_params("claim"),
            **_EXPIRE_PARAMS,
        }
        # One statement alone is its own transaction; with completions, one round trip for both.
        with sql.one_round_trip() if completions else nullcontext():
            if completions:
                done_cursor.execute(*_completion_statement(completions))
                settle_cursor.execute(*_settle_statement(completions))
            cursor.execute(sql.query("claim_jobs"), claim_params)
        if completions:
            _completed(completions, done_cursor.fetchall())
            push_released(settle_cursor.fetchall())
        rows = cursor.fetchall()
    held_back: dict[str, list[str]] = {}
    # Run in pop order (priority, then age); RETURNING order is unspecified.
    position = {job_id: index for index, job_id in enumerate(valid_ids)}
    rows.sort(key=lambda row: position[str(row[0])])
    claimed = []
    held_by_key = set()
    for row in rows:
        if not row[7]:
            held_back.setdefault(row[2], []).append(str(row[0]))
            if row[1] == "key":
                held_by_key.add(str(row[0]))
            continue
        claimed.append(
            ClaimedJob(
                id=str(row[0]),
                type=row[1],
                queue=row[2],
                payload=_json(row[3]),
                attempt=row[4],
                max_attempts=row[5],
                fence=row[6],
                trace_context=_json(row[8]),
            )
        )
    metrics.jobs_started((row[1], row[2], row[9]) for row in rows if row[7])
    if claimed:
        log.debug("jobs_claimed", count=len(claimed), worker=worker_id)
    if held_back:
        log.debug("jobs_held_back_by_queue_controls", queues={q: len(v) for q, v in held_back.items()})
    settled = {job.id for job in claimed} | {job_id for v in held_back.values() for job_id in v}
    if len(settled) < len(set(ids)):
        _log_unclaimed(set(ids) - settled)
    return Claim(claimed, held_back, frozenset(held_by_key))


def _json(value: Any) -> Any:
    """A jsonb column from a raw cursor: Django's psycopg setup hands it over as text."""
    return json.loads(value) if isinstance(value, str) else value


def mark_started(job_id: str, fence: int) -> None:
    """Set started_at to now for a claimed job that starts later than its claim."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("mark_started"), {"id": job_id, "fence": fence})


def _log_unclaimed(ids: set[str]) -> None:
    found = selectors.statuses(ids)
    for job_id in ids:
        if job_id not in found:
            log.warning("job_not_found_in_db", job_id=job_id)
        elif found[job_id] == Status.EXPIRED:
            log.info("job_expired_unstarted", job_id=job_id)
        else:
            log.warning("job_status_not_queued", job_id=job_id, status=found[job_id])


@dataclass(frozen=True)
class Completion:
    job_id: str
    fence: int
    result: Any


def complete_jobs(completions: Sequence[Completion], *, settle_rejected: bool = True) -> set[str]:
    """Complete many jobs in one statement; returns the ids the fence let through.

    A job rescued or re-claimed since this attempt began keeps its state: its
    result is not written, and a 'completion_fenced' row says so; a job asked to
    cancel meanwhile is cancelled instead (``settle_rejected_attempts``). An
    atomic handler's caller passes ``settle_rejected=False`` and settles the
    rejection once its transaction has rolled back.
    """
    if not completions:
        return set()
    with sql.prepared() as cursor, sql.prepared() as settle_cursor:
        with sql.one_round_trip():
            cursor.execute(*_completion_statement(completions))
            settle_cursor.execute(*_settle_statement(completions))
        push_released(settle_cursor.fetchall())
        return _completed(completions, cursor.fetchall(), settle_rejected=settle_rejected)


def _completion_statement(completions: Sequence[Completion]) -> tuple[str, dict[str, Any]]:
    rows = [{"id": c.job_id, "fence": c.fence, "result": c.result} for c in completions]
    return sql.query("complete_jobs"), {"rows": json.dumps(rows), **table_params("complete")}


def _settle_statement(completions: Sequence[Completion]) -> tuple[str, dict[str, Any]]:
    """The release of the completed jobs' dependents, sent right after the completion
    statement, in its transaction (its own statement: its snapshot sees the completions).
    A job the fence turned away did not complete, so its dependents are left waiting; a
    job nobody waits on costs one index look-up."""
    return sql.query("settle_dependents"), settle_params([c.job_id for c in completions])


def _completed(
    completions: Sequence[Completion], written: list[tuple], *, settle_rejected: bool = True
) -> set[str]:
    """After the completion statement: count, and settle the ones the fence turned away."""
    done = {str(row[0]) for row in written}
    metrics.jobs_completed((row[1], row[2]) for row in written)
    rejected = [(c.job_id, c.fence) for c in completions if c.job_id not in done]
    if rejected and settle_rejected:
        settle_rejected_attempts(rejected, COMPLETION_FENCED)
    for job_id in done:
        log.debug("job_completed", job_id=job_id)
    if done:
        log.debug("jobs_completed", count=len(done))
    return done


def settle_rejected_attempts(attempts: Sequence[tuple[str, int]], event: str | None) -> set[str]:
    """Attempts (job id, fence) whose outcome the fence turned away; returns the ids cancelled.

    A job still cancelling for that attempt is cancelled now: its attempt has stopped,
    which is what the cancel waited for (and a retry asked for meanwhile is applied, in
    the same transaction). The others lost their job to a rescue or a later claim: a
    row with ``event`` says so (none when ``event`` is None).
    """
    if not attempts:
        return set()
    rows = [{"id": job_id, "fence": fence} for job_id, fence in attempts]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                sql.query("confirm_cancels"), {"rows": json.dumps(rows), **table_params("confirm_cancel")}
            )
            found = cursor.fetchall()
        _cancelled(transition("confirm_cancel"), found, "the attempt stopped: cancel confirmed")
        confirmed = {str(row[0]) for row in found}
        lost = [(job_id, fence) for job_id, fence in attempts if job_id not in confirmed]
        if lost and event is not None:
            _record_fenced(lost, event)
    return confirmed


def confirm_cancel(job_id: str, fence: int) -> bool:
    """The attempt ``fence`` of a job asked to cancel has stopped: cancel the job (True),
    or nothing when the job was not cancelling for that attempt (False)."""
    return bool(settle_rejected_attempts([(job_id, fence)], None))


def _cancelled(row: Transition, found: list[tuple], message: str) -> None:
    """Log rows of jobs just cancelled by ``row``, then the retries asked for while they were
    cancelling (the rows' last column), in the caller's transaction."""
    jobs = [TransitionedJob(str(item[0]), *item[1:7]) for item in found]
    record_transitions(row, jobs, message=message)
    for item in found:
        log.info("job_cancel_confirmed", job_id=str(item[0]), by=row.name)
        if item[7]:
            apply_transition("retry", item[0], message="retried: asked for while the job was cancelling")


def _record_fenced(attempts: Sequence[tuple[str, int]], event: str) -> None:
    """Log that these (job id, fence) pairs lost their job before their outcome was written."""
    job_ids = [job_id for job_id, _ in attempts]
    existing = {
        str(pk): (job_type, queue)
        for pk, job_type, queue in Job.objects.filter(id__in=job_ids).values_list("id", "type", "queue")
    }
    metrics.jobs_fenced((existing[job_id] for job_id, _ in attempts if job_id in existing), kind=event)
    JobLog.objects.bulk_create(
        JobLog(
            job_id=job_id,
            level=JobLog.Level.WARNING,
            event=event,
            message="attempt no longer holds the job; nothing written",
            extra={"fence": fence},
        )
        for job_id, fence in attempts
        if job_id in existing
    )
    for job_id, fence in attempts:
        log.warning(event, job_id=job_id, fence=fence)


def error_class_path(exc: BaseException) -> str:
    """The import path of the class of the exception the attempt failed with (``failure_cause``),
    which django.tasks results load (exception_class)."""
    cls = type(failure_cause(exc))
    return f"{cls.__module__}.{cls.__qualname__}"


def error_summary(exc: BaseException) -> str:
    """'ExceptionType: message', what a job's owner is shown of its failure (``failure_cause``)."""
    exc = failure_cause(exc)
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def storable_text(text: str) -> str:
    """``text`` as PostgreSQL can keep it: a NUL and lone surrogates (a file name decoded with
    surrogateescape, say) written as escapes. An exception's message is whatever the handler
    put in it, and a failure that cannot be written would leave the job to run again uncounted."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def fail_job(
    job_id: str,
    fence: int,
    error: str,
    *,
    retry: bool = True,
    delay: float | None = None,
    error_class: str = "",
    traceback: str = "",
) -> str | None:
    """Record a failed attempt: back to queued after a backoff, or failed when none are left.

    ``retry`` and ``delay`` are what ``failure_policy`` decided for the exception; without
    a delay, the handler's backoff is drawn (an attempt that ended with no exception
    reaching the worker: its time limit's kill, its process's death).

    ``error`` is the summary ('ExceptionType: message'); ``error_class`` the
    import path of the exception that failed it and ``traceback`` its
    traceback, if one did. The traceback stays on the job, out of the log
    rows, so the trail does not repeat it for every attempt.

    Returns the new status, or None when the fence rejected the write. A job asked
    to cancel is cancelled instead: the attempt has ended.
    """
    job_type = Job.objects.filter(id=job_id).values_list("type", flat=True).first()
    spec = _spec_or_none(job_type)
    error = storable_text(error)
    settled = {
        "fence": fence,
        "message": error[:2000],
        "error": error[:10_000],
        "error_class": storable_text(error_class)[:300],
        "traceback": storable_text(traceback)[:50_000],
    }
    with transaction.atomic():
        attempt = selectors.running_attempt(job_id, fence)
        # schedule_retry holds only while attempts are left; otherwise fail does.
        job = None
        if retry and attempt is not None:
            if delay is None:
                delay = backoff_delay(spec, attempt)
            job = apply_transition("schedule_retry", job_id, delay=delay, **settled)
        if job is None:
            job = apply_transition("fail", job_id, **settled)
        if job is None:
            if settle_rejected_attempts([(job_id, fence)], FAILURE_FENCED):
                return Status.CANCELLED
            return None
        metrics.job_failed(job_type, job.queue, retried=job.status == Status.QUEUED)
    log.info(
        "job_retry_scheduled" if job.status == Status.QUEUED else "job_failed",
        job_id=job_id,
        attempt=job.attempts,
    )
    return job.status


def _spec_or_none(job_type: str | None):
    try:
        return get_handler(job_type)
    except Exception:  # noqa: BLE001 - an unregistered type just uses the defaults
        return None


def expire_queued_jobs(limit: int = 1000, *, queues: Sequence[str] | None = None) -> list[TransitionedJob]:
    """Settle as expired up to ``limit`` queued jobs past their expires_at (of ``queues`` when
    given), with their log rows and outbox rows taking their ids out of Redis.

    The claim settles an expired id it pops itself; this reaches the ones no worker pops
    (a paused queue, a backlog, ids lost from Redis), so none sits queued for ever.
    """
    row = transition("expire")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                sql.query("expire_queued_jobs"),
                {
                    "sources": sorted(row.sources),
                    "target": row.target,
                    "limit": limit,
                    "queues": None if queues is None else list(queues),
                },
            )
            jobs = [transitioned(found) for found in cursor.fetchall()]
        record_transitions(row, jobs, message="not started by its expiry")
        if jobs:
            # A workflow step waiting on an expired job is decided in this transaction.
            settle_dependents([job.id for job in jobs])
    if jobs:
        log.info("jobs_expired", count=len(jobs))
    return jobs


def release_stalled_keys(queues: Sequence[str], *, limit: int = 1000) -> int:
    """Give their next turn to keys of ``queues`` with parked jobs and none in line (their
    ready job was cancelled, or the claim that took it could not lock the key): how many
    jobs were unparked (sent to Redis through the outbox). See claim_v5.sql."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.query("release_stalled_keys"),
            {"queues": list(queues), "lock_class": KEY_LOCK_CLASS, "limit": limit},
        )
        released = cursor.fetchone()[0]
    if released:
        log.info("key_turns_released", count=released)
    return released


def rescue_expired_leases(limit: int = 1000, *, queues: Sequence[str] | None = None) -> list[TransitionedJob]:
    """Jobs whose worker stopped heartbeating: the attempt counts as failed. Only jobs of
    ``queues`` when given.

    The fence stays, so a paused worker that wakes up later cannot write over
    the next attempt (whose claim raises it).
    """
    requeue, fail = transition("rescue_requeue"), transition("rescue_fail")
    error = "lease expired: the worker stopped heartbeating"
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                sql.query("lock_expired_leases"),
                {
                    "sources": sorted(requeue.sources | fail.sources),
                    "limit": limit,
                    "queues": None if queues is None else list(queues),
                },
            )
            # Each job's delay doubles with its attempts, as after any failure (its handler's backoff).
            expired = [
                {"id": str(job_id), "delay": backoff_delay(_spec_or_none(job_type), attempts)}
                for job_id, job_type, attempts in cursor.fetchall()
            ]
            rows = []
            if expired:
                cursor.execute(
                    sql.query("rescue_expired_leases"),
                    {
                        "rows": json.dumps(expired),
                        "requeue_target": requeue.target,
                        "fail_target": fail.target,
                        "error": error,
                        "error_class": "queue_app.exceptions.LeaseLost",
                    },
                )
                rows = cursor.fetchall()
            jobs = [TransitionedJob(str(row[0]), *row[1:7]) for row in rows]
        for row in rows:
            metrics.job_failed(row[7], row[3], retried=row[1] == requeue.target)
        record_transitions(requeue, [job for job in jobs if job.status == requeue.target], message=error)
        record_transitions(fail, [job for job in jobs if job.status == fail.target], message=error)
        cancel = transition("rescue_cancel")
        with connection.cursor() as cursor:
            cursor.execute(
                sql.query("rescue_cancelling"),
                {
                    **table_params("rescue_cancel"),
                    "limit": limit,
                    "queues": None if queues is None else list(queues),
                },
            )
            found = cursor.fetchall()
        _cancelled(cancel, found, "lease expired while cancelling: the worker stopped heartbeating")
    for job in jobs:
        log.warning("lease_expired", job_id=job.id, attempt=job.attempts, status=job.status)
    return jobs + [TransitionedJob(str(item[0]), *item[1:7]) for item in found]


def extend_leases(held: Sequence[tuple[str, int]], *, worker_id: str) -> dict[str, str]:
    """Heartbeat: push out the leases of ``held`` (id, fence) this worker still holds;
    returns id -> status of those still held ('cancelling' when asked to cancel).

    Writes nothing for the others: the caller knows which of them it settled
    meanwhile, and records the rest (``note_leases_lost``).
    """
    if not held:
        return {}
    rows = [{"id": job_id, "fence": fence} for job_id, fence in held]
    params = {
        "rows": json.dumps(rows),
        "worker": worker_id,
        "lease": queue_settings().LEASE_SECONDS,
        "running": sorted(RUNNING),
    }
    with sql.prepared() as cursor:
        with sql.one_round_trip():
            cursor.execute(sql.query("extend_leases"), params)
        return {str(row[0]): row[1] for row in cursor.fetchall()}


def note_leases_lost(lost: Sequence[tuple[str, int]]) -> None:
    """Record that these attempts (id, fence), not settled by their worker, no longer hold their jobs."""
    if lost:
        with transaction.atomic():
            _record_fenced(lost, HEARTBEAT_FENCED)


def hand_back_job(job_id: str, fence: int, *, worker_id: str, reason: str) -> bool:
    """Return a running job to the queue unrun (clean shutdown): the attempt is not counted.

    Safe because the caller is the process that ran the attempt and has
    stopped it; the fence makes it a no-op if the job moved on meanwhile.
    ``attempts`` goes back down, ``fence`` does not: the next claim gets a
    token no earlier holder ever had.
    """
    if apply_transition("hand_back", job_id, fence=fence, worker=worker_id, message=reason) is None:
        # Asked to cancel: the attempt has stopped, so the cancel is confirmed instead.
        if not settle_rejected_attempts([(job_id, fence)], None):
            log.info("hand_back_skipped", job_id=job_id, fence=fence)
        return False
    log.info("job_handed_back", job_id=job_id, fence=fence, reason=reason)
    return True


def snooze_job(job_id: str, fence: int, seconds: float) -> str | None:
    """The handler raised Snooze: the job waits ``seconds`` and runs again, the attempt not
    charged (``attempts`` goes back down, ``snoozes`` up; ``fence`` stays).

    Returns 'queued'; 'failed' once the job has snoozed ``JOBQUEUE['MAX_SNOOZES']`` times
    (that attempt fails with SnoozeLimitExceeded, not retried); 'cancelled' when the job was
    asked to cancel (the attempt has stopped: the cancel is confirmed instead); None when
    the attempt no longer holds the job (nothing written but a 'snooze_fenced' row).
    """
    limit = queue_settings().MAX_SNOOZES
    row = transition("snooze")
    params = {
        "id": str(job_id),
        "sources": sorted(row.sources),
        "target": row.target,
        "fence": fence,
        "delay": seconds,
        "max_snoozes": limit,
    }
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql.query("snooze"), params)
            found = cursor.fetchone()
        if found is not None:
            job = TransitionedJob(str(found[0]), *found[1:7])
            record_transitions(
                row,
                [job],
                message=f"snoozed for {seconds:g} s ({found[7]} of at most {limit})",
                fence=fence,
                details={"seconds": seconds, "snoozes": found[7]},
            )
            log.info("job_snoozed", job_id=job_id, seconds=seconds, snoozes=found[7])
            return Status.QUEUED
        if selectors.running_attempt(job_id, fence) is not None:
            # Still this attempt's, so the bound refused it: the attempt fails, and a retry
            # would only meet the same bound.
            return fail_job(
                job_id,
                fence,
                f"SnoozeLimitExceeded: the job has snoozed {limit} times, as many as"
                f" JOBQUEUE['MAX_SNOOZES'] allows",
                retry=False,
                error_class="queue_app.exceptions.SnoozeLimitExceeded",
            )
        if settle_rejected_attempts([(job_id, fence)], SNOOZE_FENCED):
            return Status.CANCELLED
    return None

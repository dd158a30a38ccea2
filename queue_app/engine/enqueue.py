"""Creating jobs: idempotency keys, unique keys, key turns, and the one statement that writes them.

What a request is, and the checks it passes first, are in job_requests.py.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import connection, transaction
from django.db.models.base import ModelState
from django.utils import timezone

from queue_app import broker
from queue_app.conf import QueueSettings, queue_settings
from queue_app.engine import sql
from queue_app.engine.controls import KEY_LOCK_CLASS
from queue_app.engine.job_requests import CheckedRequest, JobRequest, check_requests
from queue_app.engine.outbox import ready_placement
from queue_app.engine.uniqueness import Uniqueness, lock_and_find
from queue_app.exceptions import (
    IdempotencyConflict,
    JobsRejected,
    QueueError,
)
from queue_app.ids import new_job_id
from queue_app.models import Job, OutboxMessage
from queue_app.observability import metrics, tracing
from queue_app.observability.logs import get_logger
from queue_app.states import (
    INITIAL_EVENT,
    PRIORITY_VALUE,
    Priority,
    Status,
)

log = get_logger(__name__)


@dataclass(slots=True)
class _Planned:
    """One job as the insert writes it."""

    request: JobRequest
    payload_json: str
    max_attempts: int
    id: uuid.UUID
    priority: str
    priority_value: int
    queue: str
    next_retry_at: datetime | None
    enqueued_at: datetime
    # (stored, also accepted): see _fingerprints.
    fingerprints: tuple[str, str]
    uniqueness: Uniqueness | None
    expires_at: datetime | None
    # Kept out of Redis behind its key's job in line (decided under the key's lock).
    parked: bool = False


def _plan(item: CheckedRequest, now: datetime) -> _Planned:
    request = item.request
    scheduled = request.run_at is not None and request.run_at > now
    return _Planned(
        request=request,
        payload_json=item.payload_json,
        max_attempts=item.max_attempts,
        id=new_job_id(),
        priority=item.priority,
        priority_value=item.priority_value,
        queue=str(request.queue),
        next_retry_at=request.run_at if scheduled else None,
        enqueued_at=request.run_at if scheduled else now,
        fingerprints=_fingerprints(item) if request.idempotency_key else ("", ""),
        uniqueness=item.uniqueness,
        expires_at=request.expires_at
        if request.expires_in is None
        else now + timedelta(seconds=request.expires_in),
    )


def _fingerprints(item: CheckedRequest) -> tuple[str, str]:
    """The request's fingerprint, with its defaults and its priority resolved (the same job
    asked for twice matches, whether as "medium" or 0), and the one a key stored before the
    priority was resolved has: a tier's name was hashed as given, an integer as now."""
    request = replace(item.request, max_attempts=item.max_attempts, priority=item.priority_value)
    if item.uniqueness is not None:  # as resolved: the defaults, and 60 the same as 60.0
        request = replace(request, unique_for=item.uniqueness.seconds, unique_states=item.uniqueness.states)
    current = request.fingerprint()
    if PRIORITY_VALUE.get(item.priority) != item.priority_value:
        return current, current  # no tier name spells this priority
    return current, replace(request, priority=item.priority).fingerprint()


def _row_values(job: _Planned, settings: QueueSettings) -> dict[str, Any]:
    """What ``insert_job`` / ``insert_jobs`` write for one job (its job, log and outbox rows)."""
    action, score, member = ready_placement(job.id, job.priority_value, job.enqueued_at, job.next_retry_at)
    # Pushed by this process after the commit: a job ready now, on a priority queue (a
    # FIFO list's order is the outbox's id order, which only the relay keeps).
    request = job.request
    waiting = bool(request.depends_on)
    extra: dict[str, Any] = {"run_at": job.next_retry_at.isoformat()} if job.next_retry_at else {}
    if waiting:
        extra["waiting"] = True
    return {
        "id": job.id,
        "type": request.type,
        "queue": job.queue,
        "payload": job.payload_json,
        "priority": job.priority,
        "priority_value": job.priority_value,
        "max_attempts": job.max_attempts,
        "next_retry_at": job.next_retry_at,
        "enqueued_at": job.enqueued_at,
        "idempotency_key": request.idempotency_key,
        "fingerprint": job.fingerprints[0],
        "unique_key": request.unique_key,
        "expires_at": job.expires_at,
        "concurrency_key": request.concurrency_key,
        "parked": False,
        "backend": request.backend,
        "message": f"enqueued on {job.queue} ({job.priority})"
        + (f", waiting on {len(request.depends_on)} job(s)" if waiting else ""),
        "extra": json.dumps(extra),
        "action": action,
        "score": score,
        "member": member,
        "direct": settings.DISPATCH_ON_COMMIT
        and action == OutboxMessage.Action.ENQUEUE
        and not settings.QUEUES.get(job.queue, False)
        and not waiting,
        "waiting": waiting,
    }


def _insert(cursor, rows: list[dict[str, Any]], owner, trace_context) -> dict[uuid.UUID, datetime]:
    """Run the insert of ``_row_values`` rows; returns created_at by id of the jobs it
    created (a taken key creates none)."""
    shared = {
        "owner_id": getattr(owner, "pk", None),
        "status": Status.QUEUED.value,
        "waiting_status": Status.WAITING.value,
        "event": INITIAL_EVENT,
        "trace_context": json.dumps(trace_context) if trace_context else None,
        "relay_grace": queue_settings().RELAY_GRACE_SECONDS,
    }
    if len(rows) == 1:
        cursor.execute(sql.query("insert_job"), {**rows[0], **shared})
    else:
        numbered = [{**row, "position": position} for position, row in enumerate(rows)]
        cursor.execute(sql.query("insert_jobs"), {"jobs": json.dumps(numbered, default=str), **shared})
    return {row[0]: row[1] for row in cursor.fetchall()}


def _dispatch(rows: list[dict[str, Any]]) -> None:
    """Push committed direct jobs to their ready sets and wake a worker, without waiting
    for Redis's answer (``broker.send_ready``).

    A failure only costs time: the relay sends the rows of jobs still queued
    once their RELAY_GRACE_SECONDS have passed. A push that lands late, after the
    job was cancelled or retried, is taken out again by its row then (the relay
    places a job by its current state, not by the row's values).
    """
    by_queue: dict[str, list[tuple[float, str]]] = {}
    for row in rows:
        by_queue.setdefault(row["queue"], []).append((row["score"], row["member"]))
    try:
        broker.send_ready(broker.get_client(), by_queue)
    except broker.REDIS_ERRORS as exc:
        log.warning("dispatch_on_commit_failed", count=len(rows), error=str(exc)[:300])


def _loaded_job(stored: dict[str, Any]) -> Job:
    """A Job as ``Model.from_db`` makes one for a row read back (every concrete field set,
    not adding, bound to this database), without its per-field loop and init signals:
    the bulk path builds one per job, and from_db cost more than the rest of its Python.
    Job has no init signal receivers, and ``stored`` names every field: both checked by
    tests/pipeline/test_enqueue_statement.py."""
    job = Job.__new__(Job)
    job._state = ModelState()
    job._state.adding = False
    job._state.db = connection.alias
    job.__dict__.update(stored)
    return job


def _created_job(planned: _Planned, owner, created_at: datetime, trace_context) -> Job:
    """The Job as stored, built from what the insert sent and returned (no read back)."""
    request = planned.request
    stored = {
        "id": planned.id,
        "type": request.type,
        "queue": planned.queue,
        "payload": request.payload,
        "priority": planned.priority,
        "priority_value": planned.priority_value,
        "status": Status.WAITING.value if request.depends_on else Status.QUEUED.value,
        "attempts": 0,
        "fence": 0,
        "max_attempts": planned.max_attempts,
        "next_retry_at": planned.next_retry_at,
        "enqueued_at": planned.enqueued_at,
        "created_at": created_at,
        "started_at": None,
        "completed_at": None,
        "last_error": "",
        "last_error_class": "",
        "last_error_traceback": "",
        "result": None,
        "idempotency_key": request.idempotency_key,
        "idempotency_fingerprint": planned.fingerprints[0],
        "unique_key": request.unique_key,
        "expires_at": planned.expires_at,
        "concurrency_key": request.concurrency_key,
        "parked": planned.parked,
        "owner_id": getattr(owner, "pk", None),
        "worker_id": "",
        "lease_expires_at": None,
        "retry_requested": False,
        "snoozes": 0,
        "progress": None,
        "progress_message": "",
        "progress_at": None,
        "backend": request.backend,
        "trace_context": trace_context,
    }
    job = _loaded_job(stored)
    if owner is not None:
        Job.owner.field.set_cached_value(job, owner)
    job.was_created = True
    job.was_duplicate = False
    return job


def _existing_for_key(existing: Job, planned: _Planned) -> Job:
    """The job a repeated idempotency key refers to, or a conflict."""
    if existing.idempotency_fingerprint not in planned.fingerprints:
        raise IdempotencyConflict(
            "this idempotency key was used with a different request", field="idempotency_key"
        )
    existing.was_created = False
    existing.was_duplicate = False
    return existing


class _KeyJobVanished(Exception):
    """A key's job was deleted (pruned) between the insert that met it and the look-up."""


def _existing_jobs(keys: list[str], owner) -> dict[str, Job]:
    """The owner's jobs holding ``keys`` (jobs without an owner share one scope)."""
    jobs = Job.objects.filter(idempotency_key__in=keys)
    jobs = jobs.filter(owner=owner) if owner is not None else jobs.filter(owner__isnull=True)
    return {job.idempotency_key: job for job in jobs}


def _held_keys(planned: list[_Planned], owner) -> dict[int, Job | int]:
    """By position, what each unique request duplicates instead of being created: the job
    holding its key (locked for the rest of the transaction), or the position of an
    earlier request of this call whose new job will hold it.

    A request whose idempotency key has a job already is left to the insert, which
    meets the key: a repeat returns its job and another request with it is a conflict,
    whatever the unique key.
    """
    wanted = [(index, job.uniqueness) for index, job in enumerate(planned) if job.uniqueness]
    repeats = [planned[index].request.idempotency_key for index, _ in wanted]
    if any(repeats):
        used = _existing_jobs([key for key in repeats if key], owner)
        wanted = [(index, u) for index, u in wanted if planned[index].request.idempotency_key not in used]
    if not wanted:
        return {}
    held: dict[int, Job | int] = dict(lock_and_find(owner, wanted))
    first_new: dict[str, int] = {}
    for index, uniqueness in wanted:
        if index in held:
            continue
        earlier = first_new.get(uniqueness.key)
        # A job created now is queued and within any period: it holds the key for a
        # later request of the call whose statuses include queued. (Should the earlier
        # request turn out to repeat an idempotency key, its job is the one returned:
        # that request had the same unique key, since the key is part of its fingerprint.)
        if earlier is not None and uniqueness.holds_while_queued():
            held[index] = earlier
        else:
            first_new.setdefault(uniqueness.key, index)
    return held


def _takes_turns(job: _Planned) -> bool:
    """A job with a concurrency key, ready now. A job with dependencies takes its turn when
    the settle of its last one releases it (workflows_v2.sql), not here: it is not in line
    while it waits, so it neither parks nor keeps its key's next job out of line."""
    request = job.request
    return request.concurrency_key is not None and job.next_retry_at is None and not request.depends_on


def _park(planned: list[_Planned], rows: list[dict[str, Any]], indexes: list[int]) -> None:
    """Park each job (of ``indexes``) whose key already has a job in line, or gets one
    earlier in this call: one id per key in Redis at a time, the claim of which gives the
    key its next turn (round robin among keys, claim_v5.sql). Takes the keys' locks, held
    until the caller's transaction ends."""
    pairs = sorted({(planned[index].queue, str(planned[index].request.concurrency_key)) for index in indexes})
    params = {
        "lock_class": KEY_LOCK_CLASS,
        "queues": [queue for queue, _ in pairs],
        "keys": [key for _, key in pairs],
    }
    with connection.cursor() as cursor:
        cursor.execute(sql.query("lock_keys"), params)
        # A statement of its own: its snapshot is taken once the locks are held.
        cursor.execute(sql.query("keys_in_line"), params)
        in_line = set(cursor.fetchall())
    for index in indexes:
        job = planned[index]
        pair = (job.queue, str(job.request.concurrency_key))
        job.parked = pair in in_line
        rows[index]["parked"] = job.parked
        if job.parked:
            rows[index]["direct"] = False  # no outbox row: nothing to push
        in_line.add(pair)


def _duplicate(job: Job) -> Job:
    """The job a unique request matched, marked as such (a copy: one job may be returned
    for several requests of one call, the first of them its creator)."""
    job = copy.copy(job)
    job.was_created = False
    job.was_duplicate = True
    return job


def _write(
    planned: list[_Planned], rows: list[dict[str, Any]], owner, trace_context
) -> tuple[list[Job], int]:
    """Insert the planned jobs; (the call's jobs in request order, how many were created).

    Raises _KeyJobVanished, inside the block that undoes this call's inserts,
    when a key met by the insert has no job by the time it is looked up.
    """
    keyed = [job.request.idempotency_key for job in planned if job.request.idempotency_key]
    unique = any(job.uniqueness for job in planned)
    # A job with a concurrency key (and no start time) may park behind its key's job in line.
    turns = [index for index, job in enumerate(planned) if _takes_turns(job)]
    # One statement is atomic on its own, so without a caller's transaction it
    # runs in autocommit: no BEGIN/COMMIT round trips. A savepoint (or a
    # transaction) is needed only when a key conflict must undo the call's other
    # jobs, or to hold unique keys' locks until the jobs that take them commit.
    block = transaction.atomic() if unique or turns or (keyed and len(planned) > 1) else nullcontext()
    with block:
        held = _held_keys(planned, owner) if unique else {}
        if turns:
            _park(planned, rows, [index for index in turns if index not in held])
        inserted = [row for index, row in enumerate(rows) if index not in held]
        created_at: dict[uuid.UUID, datetime] = {}
        if inserted:
            with sql.prepared() as cursor:
                created_at = _insert(cursor, inserted, owner, trace_context)
        direct = [row for row in inserted if row["direct"] and row["id"] in created_at]
        if direct and connection.in_atomic_block:
            # When (and only if) the caller's transaction commits.
            transaction.on_commit(partial(_dispatch, direct))
        elif direct:
            _dispatch(direct)  # committed already (autocommit)
        existing: dict[str, Job] = {}
        if len(created_at) < len(inserted):
            existing = _existing_jobs(keyed, owner)
        jobs: dict[int, Job] = {}
        key_errors: list[QueueError] = []
        for index, job in enumerate(planned):
            if index in held:
                match = held[index]
                if isinstance(match, int):
                    match = jobs.get(match)  # None: rejected below, with the call
                if match is not None:
                    jobs[index] = _duplicate(match)
            elif job.id in created_at:
                jobs[index] = _created_job(job, owner, created_at[job.id], trace_context)
            elif (found := existing.get(job.request.idempotency_key)) is None:
                raise _KeyJobVanished
            else:
                try:
                    jobs[index] = _existing_for_key(found, job)
                except IdempotencyConflict as exc:
                    exc.index = index
                    key_errors.append(exc)
        if key_errors:
            # Raised inside the block: the jobs this call inserted roll back with it.
            raise JobsRejected(key_errors, total=len(planned))
    return list(jobs.values()), len(created_at)


@tracing.traced("jobqueue.enqueue")
def enqueue_jobs(requests: Sequence[JobRequest], *, owner=None) -> list[Job]:
    """Create jobs with their log and outbox rows, all or nothing.

    Joins the caller's transaction when there is one: if it rolls back, no
    job, no outbox row, and nothing ever reaches Redis. Each returned job has
    ``was_created`` (False when an idempotency key or a unique key matched an
    existing job) and ``was_duplicate`` (True when it was a unique key: the
    job holding it, perhaps created by an earlier request of this call).
    Keys are per owner: ``owner``'s jobs (or, with no owner, the jobs without
    one) are the only ones a key can match. A unique key's lock is held until
    the caller's transaction ends: other enqueues of the key wait for it.
    Raises JobsRejected listing every job at fault (a broken rule, or a key
    used with a different request), with its index.
    """
    checked = check_requests(requests)
    if not checked:
        return []
    if any(item.request.depends_on for item in checked):
        from queue_app.engine import workflows

        return workflows.enqueue_with_dependencies(checked, owner=owner)
    return enqueue_checked(checked, owner=owner)


def enqueue_checked(checked: list[CheckedRequest], *, owner) -> list[Job]:
    """``enqueue_jobs`` past its checks: plan, write, dispatch."""
    now = timezone.now()
    # One microsecond apart keeps a call's request order among equal priorities.
    planned = [_plan(item, now + timedelta(microseconds=index)) for index, item in enumerate(checked)]
    trace_context = tracing.current_context()
    settings = queue_settings()
    rows = [_row_values(job, settings) for job in planned]
    while True:
        try:
            jobs, created = _write(planned, rows, owner, trace_context)
            break
        except _KeyJobVanished:
            # The key is free again: run the call again, as if it had come a moment later.
            # Each pass follows another transaction's delete of a job holding the key (nothing
            # inserted by this call survives a pass), so this ends as such deletes end.
            log.info("idempotency_key_job_vanished", count=len(planned))
    metrics.jobs_enqueued(job for job in jobs if job.was_created)
    # Per call, so debug: the job's own log trail records its enqueue for good.
    if created == 1:
        job = next(job for job in jobs if job.was_created)
        log.debug("job_enqueued", job_id=str(job.id), type=job.type, queue=job.queue, priority=job.priority)
    elif created:
        log.debug("jobs_enqueued", count=created)
    return jobs


def enqueue_job(
    type: str,
    payload: dict[str, Any] | None = None,
    *,
    priority: str | int = Priority.MEDIUM,
    queue: str = "default",
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    idempotency_key: str | None = None,
    unique_key: str | None = None,
    unique_for: float | None = None,
    unique_states: Sequence[str] | None = None,
    expires_at: datetime | None = None,
    expires_in: float | None = None,
    concurrency_key: str | None = None,
    depends_on: Sequence[Any] = (),
    on_failure: str = "cancel",
    owner=None,
    backend: str = "",
) -> Job:
    """Create one job (see ``enqueue_jobs``); a repeated idempotency key, or a unique key
    another job holds, returns the existing job (``was_created`` False).

    Raises the job's own error (InvalidJob, UnknownJobType, ...) rather than JobsRejected.
    """
    request = JobRequest(
        type=type,
        payload={} if payload is None else payload,
        priority=priority,
        queue=queue,
        run_at=run_at,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        unique_key=unique_key,
        unique_for=unique_for,
        unique_states=unique_states,
        expires_at=expires_at,
        expires_in=expires_in,
        concurrency_key=concurrency_key,
        depends_on=depends_on,
        on_failure=on_failure,
        backend=backend,
    )
    try:
        return enqueue_jobs([request], owner=owner)[0]
    except JobsRejected as rejected:
        raise rejected.errors[0] from None

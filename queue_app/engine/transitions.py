"""Applying a transition from ``states.TRANSITION_TABLE`` to one job, or to a set of jobs.

The table says which statuses a transition leaves and enters, which event
and level its log row has, and whether Redis must change (an outbox row).
``apply_transition`` runs the transition's conditional UPDATE (the statement
of the same name in ``sql/transitions.sql``) and writes the log row and the
outbox row from the table, in one transaction. ``apply_transition_to_jobs``
does the same for a set of jobs (the transitions users ask for: cancel,
retry), with one UPDATE and one insert of the log rows and of the outbox rows
for the whole set. The other set-based statements (the batched claim and
completion, the lease rescue) bind the same table's statuses and events, and
share ``record_transitions`` for what follows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction

from queue_app import broker
from queue_app.engine import sql
from queue_app.engine.controls import KEY_LOCK_CLASS
from queue_app.engine.outbox import enqueue_intent, notify_relay, remove_intent
from queue_app.models import JobLog, OutboxMessage
from queue_app.states import TRANSITION_TABLE, Status, Transition

# Jobs settling here decide their waiting dependents in the same transaction (workflows).
_SETTLING = frozenset({Status.FAILED, Status.CANCELLED})


@dataclass(frozen=True)
class TransitionedJob:
    """The job row as a transition left it: what its log and outbox rows need."""

    id: str
    status: str
    attempts: int
    queue: str
    priority_value: int
    enqueued_at: datetime
    next_retry_at: datetime | None
    # Facts of this transition its log row records besides the table's (a retry's max_attempts).
    log_extra: dict = field(default_factory=dict)


def transitioned(found: Sequence) -> TransitionedJob:
    """A transition statement's row: the seven columns each returns, then an optional JSON
    object for the log row's extra (Django's cursors read jsonb as text)."""
    log_extra = found[7] if len(found) > 7 else None
    if isinstance(log_extra, str):
        log_extra = json.loads(log_extra)
    return TransitionedJob(str(found[0]), *found[1:7], log_extra=log_extra or {})


def transition(name: str) -> Transition:
    """The table's row for ``name``; KeyError names it when there is none."""
    try:
        return TRANSITION_TABLE[name]
    except KeyError:
        raise KeyError(f"no transition named {name!r} in states.TRANSITION_TABLE") from None


def table_params(name: str) -> dict[str, object]:
    """What a statement binds from the table: source statuses, target, event and level."""
    row = transition(name)
    return {"sources": sorted(row.sources), "target": row.target, "event": row.event, "level": row.level}


def apply_transition(
    name: str, job_id, *, message: str = "", fence: int | None = None, **params
) -> TransitionedJob | None:
    """Apply transition ``name`` to one job; None (nothing written) when its condition does not hold.

    The condition is the transition's allowed source statuses and, for a
    running job's transition, the holder's ``fence`` (the fencing token).
    """
    row = transition(name)
    if row.fenced and fence is None:
        raise ValueError(f"transition {name!r} is fenced: pass the fence")
    # A running job's transition names one attempt (id and fence); the others take a set of ids.
    values = {
        "id": str(job_id),
        "ids": [str(job_id)],
        "sources": sorted(row.sources),
        "target": row.target,
        "fence": fence,
    }
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql.query(name), {**values, **params})
            found = cursor.fetchone()
        if found is None:
            return None
        job = transitioned(found)
        record_transitions(row, [job], message=message, fence=fence)
    return job


def apply_transition_to_jobs(name: str, job_ids: Sequence, *, message: str = "") -> list[TransitionedJob]:
    """Apply unfenced transition ``name`` to those of ``job_ids`` in one of its source statuses.

    One conditional UPDATE for the set, then one insert of their log rows and one of
    their outbox rows, in one transaction: the statements do not grow in number with
    the set. Returns the jobs it moved; the others are left as they are.
    """
    row = transition(name)
    if row.fenced:
        raise ValueError(f"transition {name!r} is fenced: apply it to one attempt with apply_transition")
    values = {
        "ids": [str(job_id) for job_id in job_ids],
        "sources": sorted(row.sources),
        "target": row.target,
    }
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql.query(name), values)
            jobs = [transitioned(found) for found in cursor.fetchall()]
        record_transitions(row, jobs, message=message)
    return jobs


def record_transitions(
    row: Transition,
    jobs: Sequence[TransitionedJob],
    *,
    message: str,
    fence: int | None = None,
    details: dict[str, object] | None = None,
) -> None:
    """The log rows (and outbox rows, where Redis must change) of jobs that just made transition ``row``.

    Runs inside the transaction of the UPDATE that moved them. A fenced
    transition's log row records the job's attempts and the holder's ``fence``;
    ``details`` adds what the transition's own row says (a snooze's seconds).
    """
    logs, outbox = [], []
    for job in jobs:
        extra: dict[str, object] = {**job.log_extra, **(details or {})}
        if row.fenced:
            extra["attempt"] = job.attempts
            if fence is not None:
                extra["fence"] = fence
        if row.outbox == OutboxMessage.Action.SCHEDULE:
            extra["next_retry_at"] = job.next_retry_at.isoformat()
        logs.append(JobLog(job_id=job.id, level=row.level, event=row.event, message=message, extra=extra))
        if row.outbox is not None:
            outbox.append(_outbox_row(row, job))
    JobLog.objects.bulk_create(logs)
    if outbox:
        OutboxMessage.objects.bulk_create(outbox)
        notify_relay()
    if jobs and row.target in _SETTLING:
        settle_dependents([job.id for job in jobs])
    elif jobs and row.name == "retry":
        resume_dependents([job.id for job in jobs])


def settle_params(job_ids: Sequence) -> dict[str, object]:
    """The parameters of ``settle_dependents`` / ``resume_dependents``: the jobs, and the class
    of the keys' locks under which a released job parks behind its key's job in line."""
    return {"ids": [str(job_id) for job_id in job_ids], "key_lock_class": KEY_LOCK_CLASS}


def settle_dependents(job_ids: Sequence) -> list[tuple[str, str]]:
    """Release or cancel the waiting dependents of jobs that just settled, in the caller's
    transaction (``queue_settle_dependents_v2``); returns (id, new status) of those moved."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("settle_dependents"), settle_params(job_ids))
        return [(str(job_id), status) for job_id, status in cursor.fetchall()]


def resume_dependents(job_ids: Sequence) -> list[tuple[str, str]]:
    """The jobs a failure of ``job_ids`` cancelled wait again (they were just retried)."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("resume_dependents"), settle_params(job_ids))
        return [(str(job_id), status) for job_id, status in cursor.fetchall()]


def _outbox_row(row: Transition, job: TransitionedJob) -> OutboxMessage:
    action = row.outbox
    if action == OutboxMessage.Action.ENQUEUE:
        return enqueue_intent(job.id, job.queue, job.priority_value, job.enqueued_at, to_head=row.to_head)
    if action == OutboxMessage.Action.SCHEDULE:
        return OutboxMessage(
            job_id=job.id, action=action, queue=job.queue, score=broker.due_score(job.next_retry_at)
        )
    return remove_intent(job.id, job.queue, job.enqueued_at)

"""Assertions on what is enqueued: the queued jobs in PostgreSQL, matched as Oban.Testing matches.

Oban's ``assert_enqueued`` matches ``args`` with PostgreSQL's JSON containment
(``args @> expected``), so a test names only the part of the payload it cares
about; ``payload=`` here is the same containment, nested objects included. A
failed assertion lists what is queued instead, as Oban's message lists the jobs it
found. Reads only: nothing here changes a job or touches Redis.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from queue_app.models import Job
from queue_app.states import PRIORITY_VALUE, Status

# The statuses of a job enqueued and not yet run: ready now or scheduled (a later start or
# a retry's backoff).
ENQUEUED_STATUSES = (Status.QUEUED,)
# How many jobs a failure message lists before it only counts the rest.
LISTED_JOBS = 10


def enqueued_jobs(
    *,
    type: str | None = None,
    payload: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: str | int | None = None,
    **fields: Any,
) -> list[Job]:
    """The queued jobs (ready or scheduled) that match, in the order a worker would run them.

    ``payload`` matches as a subset (PostgreSQL's ``@>``); ``priority`` is a tier's name
    (``"high"``) or an integer; ``fields`` are further ``Job`` field lookups
    (``max_attempts=3``, ``next_retry_at__gt=...``).

    Example:
        ```python
        assert [job.payload["order"] for job in enqueued_jobs(type="send_invoice")] == [41, 42]
        ```
    """
    return list(_matching(type=type, payload=payload, queue=queue, priority=priority, **fields))


def assert_enqueued(
    *,
    type: str | None = None,
    payload: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: str | int | None = None,
    **fields: Any,
) -> Job:
    """Fail unless a queued job matches (as ``enqueued_jobs``); returns the first that does.

    The failure names what was expected and lists the queued jobs of that type (or all
    queued jobs, when none is of that type).

    Example:
        ```python
        enqueue_job("send_invoice", {"order": 42, "copy": True}, queue="billing")
        job = assert_enqueued(type="send_invoice", payload={"order": 42}, queue="billing")
        ```
    """
    found = _matching(type=type, payload=payload, queue=queue, priority=priority, **fields).first()
    if found is None:
        expected = _describe_expected(type=type, payload=payload, queue=queue, priority=priority, **fields)
        raise AssertionError(f"Expected a queued job matching {expected}.\n{_queued_instead(type)}")
    return found


def assert_not_enqueued(
    *,
    type: str | None = None,
    payload: dict[str, Any] | None = None,
    queue: str | None = None,
    priority: str | int | None = None,
    **fields: Any,
) -> None:
    """Fail if a queued job matches (as ``enqueued_jobs``); the failure lists the ones that do."""
    found = list(_matching(type=type, payload=payload, queue=queue, priority=priority, **fields))
    if found:
        expected = _describe_expected(type=type, payload=payload, queue=queue, priority=priority, **fields)
        raise AssertionError(
            f"Expected no queued job matching {expected}.\n"
            f"Found {_count(len(found), 'queued job')}:\n{_listed(found)}"
        )


def _matching(
    *,
    type: str | None,
    payload: dict[str, Any] | None,
    queue: str | None,
    priority: str | int | None,
    **fields: Any,
) -> QuerySet[Job]:
    jobs = Job.objects.filter(status__in=ENQUEUED_STATUSES)
    if type is not None:
        jobs = jobs.filter(type=type)
    if payload is not None:
        if not isinstance(payload, dict):
            raise TypeError(f"payload must be a dict (matched as a subset), not {payload.__class__.__name__}")
        jobs = jobs.filter(payload__contains=payload)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    if priority is not None:
        jobs = jobs.filter(**_priority_lookup(priority))
    return jobs.filter(**fields).order_by("-priority_value", "enqueued_at", "id")


def _priority_lookup(priority: str | int) -> dict[str, Any]:
    if isinstance(priority, int) and not isinstance(priority, bool):
        return {"priority_value": priority}
    if isinstance(priority, str) and priority in PRIORITY_VALUE:
        return {"priority": priority}
    raise ValueError(f"priority must be one of {', '.join(PRIORITY_VALUE)} or an integer, not {priority!r}")


def _describe_expected(
    *, type: str | None, payload: Any, queue: str | None, priority: Any, **fields: Any
) -> str:
    given = [f"type={type!r}"] if type is not None else []
    if payload is not None:
        given.append(f"payload containing {payload!r}")
    given += [
        f"{name}={value!r}" for name, value in (("queue", queue), ("priority", priority)) if value is not None
    ]
    given += [f"{name}={value!r}" for name, value in fields.items()]
    return ", ".join(given) if given else "anything"


def _queued_instead(type: str | None) -> str:
    """The queued jobs a reader compares with: those of the expected type, else all."""
    queued = Job.objects.filter(status__in=ENQUEUED_STATUSES).order_by("-priority_value", "enqueued_at", "id")
    if type is not None:
        of_type = list(queued.filter(type=type)[: LISTED_JOBS + 1])
        if of_type:
            total = queued.filter(type=type).count()
            return f"Queued instead, {_count(total, 'job')} of type {type!r}:\n{_listed(of_type, total)}"
        prefix = f"No job of type {type!r} is queued."
    else:
        prefix = ""
    some = list(queued[: LISTED_JOBS + 1])
    if not some:
        return f"{prefix} No job is queued at all.".strip()
    total = queued.count()
    return f"{prefix} Queued instead, {_count(total, 'job')}:\n{_listed(some, total)}".strip()


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _listed(jobs: list[Job], total: int | None = None) -> str:
    total = len(jobs) if total is None else total
    lines = [f"  - {_described(job)}" for job in jobs[:LISTED_JOBS]]
    if total > LISTED_JOBS:
        lines.append(f"  ... and {total - LISTED_JOBS} more")
    return "\n".join(lines)


def _described(job: Job) -> str:
    scheduled = f", scheduled for {job.next_retry_at.isoformat()}" if job.next_retry_at else ""
    return (
        f"{job.id}: type={job.type!r}, queue={job.queue!r}, priority={job.priority_value}"
        f" ({job.priority}), payload={job.payload!r}{scheduled}"
    )

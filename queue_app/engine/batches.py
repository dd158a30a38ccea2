"""Batches: a set of jobs, and callbacks that are jobs waiting on every member.

A callback is a job with dependencies (workflows.py): released, or cancelled, exactly
once, by the transaction that settles the last member; nothing counts the members
outside the rows the settling transaction reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from django.db import connection, transaction

from queue_app.engine import sql
from queue_app.engine.enqueue import enqueue_jobs
from queue_app.engine.job_requests import JobRequest
from queue_app.exceptions import InvalidWorkflow
from queue_app.models import Batch, BatchMember, JobWait
from queue_app.states import TERMINAL, Status


def enqueue_batch(
    members: Sequence[JobRequest],
    *,
    on_complete: JobRequest | None = None,
    on_success: JobRequest | None = None,
    on_failure: JobRequest | None = None,
    name: str = "",
    owner=None,
) -> Batch:
    """Enqueue ``members`` as a batch, with callbacks, in one call (the caller's transaction).

    Each callback is a job waiting on every member, released exactly once, by the
    transaction that settles the last member: ``on_complete`` whatever the members' ends,
    ``on_success`` only when every one completed (else it is cancelled, at the first
    failure), ``on_failure`` only when at least one failed or was cancelled (else it is
    cancelled). ``Batch.members`` and ``batch_counts`` tell how far it is.
    """
    members = [replace(member) for member in members]
    callbacks = []
    for attribute, request, policy in (
        ("on_complete", on_complete, JobWait.OnFailure.CONTINUE),
        ("on_success", on_success, JobWait.OnFailure.CANCEL),
        ("on_failure", on_failure, JobWait.OnFailure.ONLY_ON_FAILURE),
    ):
        if request is None:
            continue
        if not isinstance(request, JobRequest):
            raise InvalidWorkflow("must be a JobRequest", field=attribute)
        if not members and attribute == "on_failure":
            continue  # nothing can fail
        callback = replace(request, depends_on=[*request.depends_on, *members], on_failure=policy.value)
        callbacks.append((attribute, callback))
    requests = members + [callback for _, callback in callbacks]
    with transaction.atomic():
        batch = Batch.objects.create(name=str(name)[:200], owner=owner)
        jobs = enqueue_jobs(requests, owner=owner)
        BatchMember.objects.bulk_create(
            [BatchMember(job_id=job.id, batch=batch) for job in jobs[: len(members)] if job.was_created],
            batch_size=5000,
        )
        for (attribute, _), job in zip(callbacks, jobs[len(members) :], strict=True):
            setattr(batch, f"{attribute}_id", job.id)
        batch.save(update_fields=["on_complete", "on_success", "on_failure"])
    batch.jobs = jobs[: len(members)]
    return batch


def batch_counts(batch) -> dict[str, int]:
    """The members by status, with ``total`` and ``pending`` (not yet settled)."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("batch_counts"), {"batch": str(getattr(batch, "pk", batch))})
        by_status = dict(cursor.fetchall())
    counts = {status: by_status.get(status, 0) for status in Status.values}
    counts["total"] = sum(by_status.values())
    counts["pending"] = counts["total"] - sum(counts[status] for status in TERMINAL)
    return counts

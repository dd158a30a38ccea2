"""Retention: deleting finished jobs (with their log and outbox rows) past an age, in batches."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet

from queue_app.models import Job
from queue_app.observability.logs import get_logger
from queue_app.states import TERMINAL

log = get_logger(__name__)

# A long prune reports its running totals this often (a million rows take minutes).
PROGRESS_EVERY_SECONDS = 5.0


def prune_finished_jobs(
    *,
    finished_before: dict[str, datetime],
    queues: Sequence[str] | None = None,
    backend: str | None = None,
    batch_size: int = 1000,
    dry_run: bool = False,
    report: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Delete jobs of each given finished status completed before its cutoff; counts per status.

    Each batch is its own short transaction, so a prune never holds one huge
    DELETE's locks; rows are locked with SKIP LOCKED, so a job being retried at
    that moment is skipped, not deleted under the retry. Queued and running
    jobs are never candidates. ``report`` gets a line of running totals every
    PROGRESS_EVERY_SECONDS.
    """
    unknown = set(finished_before) - TERMINAL
    if unknown:
        raise ValueError(f"only finished jobs are pruned, not {', '.join(sorted(unknown))}")
    counts = {}
    started = last_report = time.monotonic()
    for status, cutoff in finished_before.items():
        candidates = finished_jobs(status, cutoff, queues=queues, backend=backend)
        if dry_run:
            counts[status] = candidates.count()
            continue
        counts[status] = 0
        while True:
            with transaction.atomic():
                ids = list(oldest_batch(candidates, batch_size))
                if ids:
                    # Logs and outbox rows go with their job (ORM cascade, same transaction).
                    Job.objects.filter(id__in=ids).delete()
            counts[status] += len(ids)
            if report is not None and time.monotonic() - last_report >= PROGRESS_EVERY_SECONDS:
                last_report = time.monotonic()
                so_far = " ".join(f"{name}={count}" for name, count in counts.items())
                report(f"prune progress after {last_report - started:.0f}s: deleted {so_far}")
            if len(ids) < batch_size:
                break
    log.info("jobs_pruned", dry_run=dry_run, **counts)
    return counts


def finished_jobs(
    status: str, cutoff: datetime, *, queues: Sequence[str] | None = None, backend: str | None = None
) -> QuerySet[Job]:
    """Jobs of a finished ``status`` completed before ``cutoff`` (of ``queues``, ``backend`` if given)."""
    candidates = Job.objects.filter(status=status, completed_at__lt=cutoff)
    if queues:
        candidates = candidates.filter(queue__in=list(queues))
    if backend is not None:
        candidates = candidates.filter(backend=backend)
    return candidates


def oldest_batch(candidates: QuerySet[Job], size: int) -> QuerySet:
    """The ids of the ``size`` oldest ``candidates``, locked; rows locked elsewhere (a retry
    under way) are skipped. Oldest first: a range of the status's idx_jobs_<status>_at,
    however many jobs finished since."""
    return (
        candidates.order_by("completed_at")
        .select_for_update(skip_locked=True)
        .values_list("id", flat=True)[:size]
    )

"""Queue controls: pause and resume a queue, limit how many of its jobs run at once and how fast.

The ``queue_app_job_queues`` row (``QueueState``) is the record, and the claim statement
reads it, so a control holds across every worker on every host as soon as it
commits. Each change takes the queue's exclusive advisory lock, which every
claim of the queue holds (shared) until it commits: ``pause_queue`` returns
only after the claims in flight have committed, and no claim after it takes a
job of the queue. Workers also skip paused queues when they pop (a cached view,
refreshed every second), so a paused queue's ids stay in Redis, in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Now

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import sql
from queue_app.exceptions import InvalidQueueControl, UnknownQueue
from queue_app.models import KeyBucket, QueueState
from queue_app.observability.logs import get_logger

log = get_logger(__name__)

# The first key of every queue advisory lock (the second is hashtext(name)).
QUEUE_LOCK_CLASS = 0x51554555
# The first key of every concurrency key's advisory lock (the second is
# hashtext(queue || '/' || key)): the enqueue takes it to park a job behind its key's job in
# line, the claim tries it to give the key its next turn (engine/sql/schema/claim_v5.sql).
KEY_LOCK_CLASS = QUEUE_LOCK_CLASS + 1

# What a limit may be set to; larger numbers would mean "no limit" anyway.
MAX_CONCURRENCY_LIMIT = 1_000_000
MAX_RATE_LIMIT = 1_000_000.0

# set_queue_limits' default: the limit keeps its value (read and changed under the queue's
# lock, so two changes of different limits at once both hold).
UNCHANGED: Any = object()


@dataclass(frozen=True)
class QueueControls:
    name: str
    paused: bool = False
    concurrency_limit: int | None = None
    rate_limit: float | None = None
    # Per concurrency key (each value of Job.concurrency_key): running jobs, starts per second.
    key_concurrency_limit: int | None = None
    key_rate_limit: float | None = None

    @property
    def limited(self) -> bool:
        """Its claims count or spend (so take its lock exclusively): a queue or per-key limit."""
        limits = (self.concurrency_limit, self.rate_limit, self.key_concurrency_limit, self.key_rate_limit)
        return any(limit is not None for limit in limits)


def _check_name(name: str) -> str:
    if name not in queue_settings().QUEUES:
        raise UnknownQueue(f"no queue named {name!r} in JOBQUEUE['QUEUES']", field="name")
    return name


def lock_queue(name: str) -> None:
    """Take the queue's exclusive lock (in the caller's transaction): claims in flight finish first."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("lock_queue_for_change"), {"lock_class": QUEUE_LOCK_CLASS, "name": name})


def _change(name: str, **values) -> QueueControls:
    _check_name(name)
    with transaction.atomic():
        lock_queue(name)
        QueueState.objects.get_or_create(name=name)
        QueueState.objects.filter(name=name).update(updated_at=Now(), **values)
    return queue_controls([name])[name]


def pause_queue(name: str) -> QueueControls:
    """Stop every worker from claiming the queue's jobs; queued jobs stay queued, in place.

    Returns once no claim of the queue is in flight: none commits after this.
    """
    controls = _change(name, paused=True)
    log.info("queue_paused", queue=name)
    return controls


def resume_queue(name: str) -> QueueControls:
    """Let workers claim the queue's jobs again, and wake an idle one."""
    controls = _change(name, paused=False)
    log.info("queue_resumed", queue=name)
    try:
        broker.wake(broker.get_client(), name)
    except broker.REDIS_ERRORS as exc:
        # Idle workers look at the queue again within WORKER_POLL_SECONDS anyway.
        log.warning("queue_resume_wake_failed", queue=name, error=str(exc)[:300])
    return controls


def _check_concurrency_limit(limit: Any, field: str) -> None:
    if limit not in (UNCHANGED, None) and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CONCURRENCY_LIMIT
    ):
        raise InvalidQueueControl(
            f"must be a whole number from 1 to {MAX_CONCURRENCY_LIMIT}, or null for no limit", field=field
        )


def _check_rate_limit(limit: Any, field: str) -> None:
    if limit not in (UNCHANGED, None) and (
        isinstance(limit, bool)
        or not isinstance(limit, int | float)
        or not math.isfinite(limit)
        or not 0 < limit <= MAX_RATE_LIMIT
    ):
        raise InvalidQueueControl(
            f"must be a number of jobs per second above 0 and at most {MAX_RATE_LIMIT:g}, "
            "or null for no limit",
            field=field,
        )


def set_queue_limits(
    name: str,
    *,
    concurrency_limit: int | None = UNCHANGED,
    rate_limit: float | None = UNCHANGED,
    key_concurrency_limit: int | None = UNCHANGED,
    key_rate_limit: float | None = UNCHANGED,
) -> QueueControls:
    """Set (or, with None, remove) the queue's concurrency and rate limits, and its limits
    per concurrency key; a limit not given keeps its value.

    A rate limit given starts with a full bucket (for a per-key rate: every key's).
    """
    _check_concurrency_limit(concurrency_limit, "concurrency_limit")
    _check_rate_limit(rate_limit, "rate_limit")
    _check_concurrency_limit(key_concurrency_limit, "key_concurrency_limit")
    _check_rate_limit(key_rate_limit, "key_rate_limit")
    values: dict[str, Any] = {}
    if concurrency_limit is not UNCHANGED:
        values["concurrency_limit"] = concurrency_limit
    if rate_limit is not UNCHANGED:
        rate = None if rate_limit is None else float(rate_limit)
        values.update(rate_limit=rate, rate_tokens=None, rate_updated_at=None)
    if key_concurrency_limit is not UNCHANGED:
        values["key_concurrency_limit"] = key_concurrency_limit
    with transaction.atomic():
        if key_rate_limit is not UNCHANGED:
            values["key_rate_limit"] = None if key_rate_limit is None else float(key_rate_limit)
            # Under the queue's lock (taken by _change, held to the commit): no claim
            # spends from a bucket between its deletion and the new rate.
            _check_name(name)
            lock_queue(name)
            KeyBucket.objects.filter(queue=name).delete()
        controls = _change(name, **values)
    log.info(
        "queue_limits_set",
        queue=name,
        concurrency_limit=controls.concurrency_limit,
        rate_limit=controls.rate_limit,
        key_concurrency_limit=controls.key_concurrency_limit,
        key_rate_limit=controls.key_rate_limit,
    )
    return controls


def prune_full_key_buckets(queues) -> int:
    """Delete the per-key rate buckets of ``queues`` that are full again (or whose queue has
    no per-key rate any more); how many were deleted."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("prune_full_key_buckets"), {"queues": list(queues)})
        return cursor.rowcount


def queue_controls(names=None) -> dict[str, QueueControls]:
    """The controls of each configured queue (or of ``names``); a queue without a row has none."""
    names = list(queue_settings().QUEUES) if names is None else list(names)
    rows = QueueState.objects.filter(name__in=names).values_list(
        "name", "paused", "concurrency_limit", "rate_limit", "key_concurrency_limit", "key_rate_limit"
    )
    found = {row[0]: QueueControls(*row) for row in rows}
    return {name: found.get(name, QueueControls(name)) for name in names}

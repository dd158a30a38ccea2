"""Dependents a completion released, pushed to their ready sets once it commits.

The completion's transaction releases a waiting job (``queue_settle_dependents``) and
writes its outbox row, which the relay sends at once. A chain's next step would still
wait for that hop (the relay waking on NOTIFY, claiming, pushing), which an enqueued job
does not: its enqueuer pushes it itself (DISPATCH_ON_COMMIT). The completing process
does the same for what it released, after the commit; the outbox row stays the safety
net, and a push that lands late (the job claimed meanwhile) is absorbed by the claim.
Jobs of strict-FIFO queues, and jobs released with a start time still ahead, are left to
the relay; a job released parked (behind its key's job in line) is not pushed at all.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import selectors
from queue_app.observability.logs import get_logger
from queue_app.states import Status

log = get_logger(__name__)


def push_released(settled: Iterable[tuple]) -> None:
    """``settled``: the settle statement's rows (id, status); those now queued are pushed
    once the transaction commits (at once, in autocommit)."""
    released = [str(job_id) for job_id, status in settled if status == Status.QUEUED]
    if not released:
        return  # every completion calls this; almost none releases anything
    settings = queue_settings()
    if settings.DISPATCH_ON_COMMIT:
        transaction.on_commit(lambda: _push(released, settings.QUEUES))


def _push(released: list[str], fifo_queues: dict[str, bool]) -> None:
    by_queue: dict[str, list[tuple[float, str]]] = {}
    for job_id, queue, priority_value, enqueued_at, due in selectors.queued_for_promotion(released):
        if due is None and not fifo_queues.get(queue, False):
            member = broker.ready_member(job_id, enqueued_at)
            by_queue.setdefault(queue, []).append((broker.ready_score(priority_value), member))
    if not by_queue:
        return
    try:
        broker.send_ready(broker.get_client(), by_queue)
    except broker.REDIS_ERRORS as exc:
        log.warning("released_push_failed", count=len(released), error=str(exc)[:300])

"""Queue maintenance, done by one elected process per queue (Oban's peer, lifeline and stager).

Three chores keep a queue moving between reconcile passes:

- the in-flight sweep: ids popped by a worker that died before its claim
  committed go back in line (``broker.return_expired``), every SWEEP_SECONDS;
- promotion: due ids in the retry set move to the ready structure
  (``broker.take_due``, priorities looked up in PostgreSQL), every SWEEP_SECONDS;
- lease rescue: jobs whose worker stopped heartbeating are requeued or failed
  (``execution.rescue_expired_leases``), every LEASE_RESCUE_SECONDS, their Redis
  intents going out through the outbox;
- expiry: queued jobs past their ``expires_at`` that no claim met are settled as
  expired (``execution.expire_queued_jobs``), with the lease rescue;
- key turns: a concurrency key with parked jobs and none in line (its ready job
  was cancelled, or the claim could not lock the key) gets its next job sent to
  Redis (``execution.release_stalled_keys``), every SWEEP_SECONDS; and the per-key
  rate buckets that have refilled are deleted (``controls.prune_full_key_buckets``),
  with the lease rescue.

Each is safe to run twice at once (the scripts move only what the calling call
removed, the rescue is a conditional UPDATE with SKIP LOCKED), so the election
is about cost, not correctness: one process per queue does them instead of
every worker. The leader holds the queue's row in ``queue_app_job_maintenance_leases``
and renews it every ELECTION_SECONDS; one that dies, stalls or loses PostgreSQL
stops renewing, and another candidate takes the row once it has expired
(LEADER_LEASE_SECONDS, database clock). Two leaders at once need a leader to
stall past its own lease, and it stops acting as one by its own clock before
the database lets another take over.

Candidates call ``tick`` often (a worker's heartbeat thread every 0.1 s): it
returns at once unless an election or a chore is due.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import controls, execution, maintenance_leases, selectors
from queue_app.observability.logs import get_logger
from queue_app.runtime.outages import OutageGuard

log = get_logger(__name__)

# How often a candidate asks for the leases (a leader: renews them).
ELECTION_SECONDS = 1.0
# How long a lease lasts unrenewed: a dead leader is replaced within this plus ELECTION_SECONDS.
LEADER_LEASE_SECONDS = 5.0
# How often the leader sweeps the in-flight sets and promotes due retries.
SWEEP_SECONDS = 0.5
# Ids (or jobs) per script call or statement; a chore repeats full batches for at most
# CHORE_BUDGET_SECONDS per tick (a worker's heartbeat thread has leases to extend too).
BATCH_SIZE = 1000
CHORE_BUDGET_SECONDS = 1.0


class Maintenance:
    """Candidate for the maintenance of ``queues``; ``tick`` does what is due while it leads.

    ``holder`` names this process in the lease rows (a worker passes its worker id,
    unique among live workers). Not thread-safe: one thread calls ``tick``.
    """

    def __init__(self, queues: Sequence[str], *, holder: str) -> None:
        settings = queue_settings()
        self.queues = sorted(set(queues))
        # Every configured queue -> strict FIFO?: where a promoted job goes.
        self.fifo = dict(settings.QUEUES)
        self.holder = holder
        self.rescue_seconds = settings.LEASE_RESCUE_SECONDS
        # The queues this process leads, and until when it may act on that (monotonic).
        self.leading: set[str] = set()
        self._leading_until = 0.0
        self._rows_added = False
        self._next_election = 0.0
        self._next_sweep = 0.0
        self._next_rescue = 0.0

    def tick(self, client: Any) -> None:
        """Elect, sweep, promote and rescue, each when due. Store errors propagate (the
        caller logs them and calls again); the leases then lapse on their own."""
        now = time.monotonic()
        if now >= self._next_election:
            self._next_election = now + ELECTION_SECONDS
            self._elect(now)
        if not self.leading or time.monotonic() >= self._leading_until:
            return
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_SECONDS
            self._sweep(client)
        if now >= self._next_rescue:
            self._next_rescue = now + self.rescue_seconds
            self._rescue()

    def resign(self) -> None:
        """Hand the leases on at once (a clean stop), instead of after LEADER_LEASE_SECONDS."""
        if not self.leading:
            return
        queues, self.leading = sorted(self.leading), set()
        try:
            maintenance_leases.release_leases(queues, holder=self.holder)
        except OutageGuard.errors as exc:
            log.warning("maintenance_leases_not_released", holder=self.holder, error=str(exc)[:300])
        else:
            log.info("maintenance_leadership_released", queues=queues, holder=self.holder)

    # --- the election -----------------------------------------------------------

    def _elect(self, now: float) -> None:
        try:
            if not self._rows_added:
                maintenance_leases.add_leases(self.queues)
                self._rows_added = True
            leading = maintenance_leases.take_leases(
                self.queues, holder=self.holder, lease_seconds=LEADER_LEASE_SECONDS
            )
        except BaseException:
            self._rows_added = False  # the rows may be what went wrong: added again next time
            raise
        # The database's lease started no earlier than ``now``; acting until one election
        # before it ends leaves the successor a clear field on a stalled leader's return.
        self._leading_until = now + LEADER_LEASE_SECONDS - ELECTION_SECONDS
        gained, lost = leading - self.leading, self.leading - leading
        if len(leading) < len(self.queues):
            # A queue led by no one may have lost its row (deleted by hand, a restored backup):
            # it is added again next time, or no process would ever lead that queue again.
            self._rows_added = False
        self.leading = leading
        if lost:
            log.info("maintenance_leadership_lost", queues=sorted(lost), holder=self.holder)
        if gained:
            log.info("maintenance_leader_elected", queues=sorted(gained), holder=self.holder)
            # A new leader catches up at once: the previous one may have been gone a while.
            self._next_sweep = self._next_rescue = now

    # --- the chores ---------------------------------------------------------------

    def _sweep(self, client: Any) -> None:
        for queue in sorted(self.leading):
            fifo = self.fifo.get(queue, False)
            returned = _in_batches(
                lambda queue=queue, fifo=fifo: broker.return_expired(client, queue, fifo, BATCH_SIZE)
            )
            if returned:
                log.warning("popped_ids_returned", queue=queue, count=returned, holder=self.holder)
            promoted = _in_batches(lambda queue=queue: self._promote(client, queue))
            if promoted:
                log.debug("retry_promoted", queue=queue, count=promoted, holder=self.holder)
        execution.release_stalled_keys(sorted(self.leading), limit=BATCH_SIZE)

    def _promote(self, client: Any, queue: str) -> int:
        """Move one batch of due ids of ``queue`` to their ready structures; returns how many were taken."""
        taken = broker.take_due(client, queue, BATCH_SIZE)
        if not taken:
            return 0
        # A crash between take_due and apply loses these ids from Redis only; the
        # reconciler re-adds queued jobs missing from every structure.
        rows = selectors.queued_for_promotion(taken)
        broker.apply(
            client,
            (
                broker.Intent(
                    "enqueue",
                    job_id,
                    job_queue,
                    self.fifo.get(job_queue, False),
                    broker.ready_score(priority_value),
                    broker.ready_member(job_id, enqueued_at),
                )
                for job_id, job_queue, priority_value, enqueued_at, _ in rows
            ),
        )
        return len(taken)

    def _rescue(self) -> None:
        queues = sorted(self.leading)
        rescued = _in_batches(lambda: len(execution.rescue_expired_leases(limit=BATCH_SIZE, queues=queues)))
        if rescued:
            log.info("leases_rescued", queues=queues, count=rescued, holder=self.holder)
        expired = _in_batches(lambda: len(execution.expire_queued_jobs(limit=BATCH_SIZE, queues=queues)))
        if expired:
            log.info("queued_jobs_expired", queues=queues, count=expired, holder=self.holder)
        controls.prune_full_key_buckets(queues)


def _in_batches(batch: Callable[[], int]) -> int:
    """Run ``batch`` while it does a full BATCH_SIZE, for at most CHORE_BUDGET_SECONDS; the total done."""
    deadline = time.monotonic() + CHORE_BUDGET_SECONDS
    total = 0
    while True:
        done = batch()
        total += done
        if done < BATCH_SIZE or time.monotonic() >= deadline:
            return total

"""The producer: decides what a worker claims next, and takes it from Redis.

How many (recent durations, free slots, ``--max-jobs``), from which queues (round
robin, skipping paused queues and queues a claim just found full), waiting for a
wake token when there is nothing, acknowledging popped ids once their claim
committed, and putting back in place what the claim did not take. Redis only
suggests: the claim in PostgreSQL (``execution.claim``) decides.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import redis

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import controls, execution, selectors
from queue_app.engine.execution import Claim, Completion
from queue_app.observability.logs import get_logger

log = get_logger(__name__)

# How often a worker re-reads its queues' controls (pause, limits) for its pops. The
# claim reads them itself, so a stale view costs a put-back, never a wrong claim.
CONTROLS_REFRESH_SECONDS = 1.0
# How long a worker leaves a queue alone after its claim held ids back because the
# queue was full (concurrency limit): its running jobs need time to finish.
HELD_BACK_PAUSE_SECONDS = 0.1
# How long an id its concurrency key's limits held back waits in the retry set: out of
# the line meanwhile, so the ids of other keys behind it are popped.
KEY_HELD_BACK_SECONDS = 0.1
# The longest a claimed id stays in its in-flight set when no pop comes to acknowledge
# it (the heartbeat thread does then); well inside broker.INFLIGHT_SECONDS.
ACK_DELAY_SECONDS = 1.0


class Producer:
    def __init__(self, *, worker_id: str, queues: Sequence[str], max_jobs: int | None = None) -> None:
        settings = queue_settings()
        self.worker_id = worker_id
        self.queues = list(queues)
        # (queue, is strict FIFO) pairs: which Redis structure each served queue uses.
        self.queue_layouts = [(queue, settings.QUEUES[queue]) for queue in self.queues]
        self.fifo = dict(self.queue_layouts)
        self.batch_size = settings.WORKER_BATCH_SIZE
        self.poll_seconds = settings.WORKER_POLL_SECONDS
        self.claim_ahead_seconds = settings.WORKER_CLAIM_AHEAD_SECONDS
        self.max_jobs = max_jobs
        # Smoothed seconds per job in this process: sizes the next claim.
        self.seconds_per_job: float | None = None
        self._next_queue = 0
        self.controls: dict[str, controls.QueueControls] = {}
        self._controls_read_at = float("-inf")
        # queue -> monotonic time before which this worker does not pop it (held back).
        self._held_until: dict[str, float] = {}
        # Popped ids whose claim committed, not yet dropped from the in-flight sets (queue ->
        # (id, pop token) pairs): the next pop of the queue does it, or the heartbeat thread
        # after ACK_DELAY_SECONDS.
        self._unacknowledged: dict[str, list[tuple[str, str]]] = {}
        # id -> pop token of the ids popped and not yet acknowledged or put back.
        self._tokens: dict[str, str] = {}
        self._unacknowledged_since = 0.0
        # Held while acknowledgements are sent, not only taken: a hand-back waits for them
        # to land (see acknowledge_now). Reentrant: the senders take the ids under it too.
        self._ack_lock = threading.RLock()

    # --- controls and sizing -----------------------------------------------------

    def refresh_controls(self, *, now: bool = False, every: float = CONTROLS_REFRESH_SECONDS) -> None:
        """Re-read the served queues' controls when ``every`` seconds old (or ``now``)."""
        if not now and time.monotonic() - self._controls_read_at < every:
            return
        self.controls = controls.queue_controls(self.queues)
        self._controls_read_at = time.monotonic()

    def may_pop(self, queue: str, now: float) -> bool:
        return not self.controls[queue].paused and self._held_until.get(queue, 0.0) <= now

    def wait_seconds(self) -> float:
        """How long an idle worker blocks for a wake token: until the first held-back
        queue may be popped again, at most WORKER_POLL_SECONDS."""
        now = time.monotonic()
        waits = [until - now for until in self._held_until.values() if until > now]
        return max(0.01, min([self.poll_seconds, *waits]))

    def job_took(self, seconds: float) -> None:
        previous = self.seconds_per_job
        self.seconds_per_job = seconds if previous is None else 0.8 * previous + 0.2 * seconds

    def claim_size(self, *, started: int, free_slots: int | None) -> int:
        """How many jobs to claim at once: as many as recent durations say will start
        within WORKER_CLAIM_AHEAD_SECONDS (one while nothing has run yet), at most the batch
        size; with slots, one per free slot; never more than ``max_jobs`` leaves to start.
        A claimed job is one no other worker can run."""
        limit = self.batch_size
        if self.max_jobs is not None:
            limit = min(limit, self.max_jobs - started)
        if free_slots is not None:
            return max(1, min(limit, free_slots))
        if self.seconds_per_job is None:
            return 1
        fit = int(self.claim_ahead_seconds / max(self.seconds_per_job, 1e-6))
        return max(1, min(limit, fit))

    def work_left(self, *, with_scheduled: bool) -> bool:
        """For a burst worker: a queued job that is due (or, with_scheduled, any queued job)
        in a queue that is not paused."""
        active = [queue for queue in self.queues if not self.controls[queue].paused]
        if not active:
            return False
        if with_scheduled:
            return selectors.has_queued(active)
        return selectors.has_due(active)

    # --- popping -------------------------------------------------------------------

    def reserve(self, client, want: int) -> dict[str, list[str]]:
        """Pop ids into the in-flight sets, queue by queue in round-robin order: each round
        starts at the next queue, so a flooded queue cannot starve the others."""
        start = self._next_queue
        self._next_queue = (start + 1) % len(self.queue_layouts)
        popped: dict[str, list[str]] = {}
        # Tokens of an earlier pop whose claim never came (a store error) are of no more use.
        self._tokens.clear()
        now = time.monotonic()
        with self._ack_lock:
            # Should Redis fail here, ids taken and not acknowledged return to ready at their
            # deadline, as duplicates the claim drops.
            unacknowledged = self._take_unacknowledged()
            for queue, fifo in self.queue_layouts[start:] + self.queue_layouts[:start]:
                if not self.may_pop(queue, now):
                    continue  # paused, or full a moment ago: its ids stay in line
                ids = broker.reserve(client, queue, fifo, want, acknowledge=unacknowledged.pop(queue, ()))
                self._tokens.update(ids.pairs())
                if ids:
                    popped[queue] = ids
                    want -= len(ids)
                    if want <= 0:
                        break
            if unacknowledged:
                broker.acknowledge(client, unacknowledged)
        return popped

    def wait_for_work(self, client, want: int, stopping) -> dict[str, list[str]]:
        """Block for a wake token. Serving one queue that may be popped (and not on a
        cluster), pop in the same round trip: what the next step would pop first."""
        wait = self.wait_seconds()
        if len(self.queue_layouts) == 1 and not broker.is_cluster(client):
            [(queue, fifo)] = self.queue_layouts
            if self.may_pop(queue, time.monotonic()):
                ids = broker.wait_and_reserve(client, queue, fifo, want, wait)
                self._tokens.update(ids.pairs())
                if ids and stopping():
                    # Stopped while waiting: the ids go back in place, unclaimed.
                    broker.put_back(client, queue, fifo, ids)
                    self._tokens.clear()
                    return {}
                return {queue: ids} if ids else {}
        broker.wait_for_work(client, self.queues, wait)
        return {}

    def claim(self, popped: dict[str, list[str]], completions: Sequence[Completion]) -> Claim:
        """Claim the popped ids (the previous batch's completions share its commit)."""
        ids = [job_id for queue_ids in popped.values() for job_id in queue_ids]
        return execution.claim(
            ids,
            worker_id=self.worker_id,
            queues={queue: self.controls[queue].limited for queue in popped},
            completions=completions,
        )

    def after_claim(self, client, popped: dict[str, list[str]], claim: Claim) -> None:
        """Put back what the claim did not take, and leave the rest to be acknowledged."""
        try:
            if claim.held_back:
                self._put_back_held(client, popped, claim.held_back, claim.held_by_key)
        except redis.RedisError as exc:
            # Unacknowledged ids return to ready at their deadline: duplicates the claim drops.
            log.warning("pop_not_acknowledged", worker=self.worker_id, error=str(exc)[:300])
        self._defer_acknowledgement(popped)
        ids = {job_id for queue_ids in popped.values() for job_id in queue_ids}
        unclaimed = ids - {job.id for job in claim.jobs}
        unclaimed -= {job_id for held in claim.held_back.values() for job_id in held}
        if unclaimed:
            self._put_back_not_due(unclaimed)

    def _put_back_held(
        self,
        client,
        popped: dict[str, list[str]],
        held_back: dict[str, list[str]],
        by_key: frozenset[str] = frozenset(),
    ) -> None:
        """Return the ids the queue controls held back to their place in line (they are
        then not acknowledged), and leave their queues alone for a moment: a paused one
        until the controls say otherwise, a full or rate-limited one briefly.

        Ids their concurrency key's limits held back go to the retry set for
        KEY_HELD_BACK_SECONDS instead (and are acknowledged like claimed ones): the queue
        is not full, and the other keys' ids behind them are popped meanwhile.
        """
        now = time.monotonic()
        aside = [(queue, job_id) for queue, held in held_back.items() for job_id in held if job_id in by_key]
        if aside:
            due = broker.due_score(datetime.now(UTC) + timedelta(seconds=KEY_HELD_BACK_SECONDS))
            broker.apply(
                client,
                (broker.Intent("schedule", job_id, queue, self.fifo[queue], due) for queue, job_id in aside),
            )
        held_back = {q: [i for i in held if i not in by_key] for q, held in held_back.items()}
        held_back = {q: held for q, held in held_back.items() if held}
        for queue, held in held_back.items():
            broker.put_back(client, queue, self.fifo[queue], held)
            put_back = set(held)
            for job_id in put_back:
                self._tokens.pop(job_id, None)
            popped[queue] = [job_id for job_id in popped[queue] if job_id not in put_back]
            self._held_until[queue] = now + HELD_BACK_PAUSE_SECONDS
        if not held_back:
            return
        self.refresh_controls(now=True)
        for queue, state in self.controls.items():
            if queue in held_back and state.rate_limit:
                # About when the bucket holds a whole token again.
                self._held_until[queue] = now + min(1.0, max(HELD_BACK_PAUSE_SECONDS, 1 / state.rate_limit))

    def _put_back_not_due(self, ids: set[str]) -> None:
        """Ids promoted a little early (clocks differ) go back to the retry set."""
        waiting = selectors.not_due(ids)
        if waiting:
            broker.apply(
                broker.get_client(),
                (
                    broker.Intent("schedule", job_id, queue, False, broker.due_score(due))
                    for job_id, queue, due in waiting
                ),
            )

    # --- acknowledgements --------------------------------------------------------------

    def _defer_acknowledgement(self, popped: dict[str, list[str]]) -> None:
        """Leave claimed ids for the next pop (or the heartbeat) to acknowledge."""
        with self._ack_lock:
            if not self._unacknowledged:
                self._unacknowledged_since = time.monotonic()
            for queue, ids in popped.items():
                pairs = [(job_id, self._tokens.pop(job_id)) for job_id in ids if job_id in self._tokens]
                if pairs:
                    self._unacknowledged.setdefault(queue, []).extend(pairs)

    def _take_unacknowledged(self) -> dict[str, list[tuple[str, str]]]:
        with self._ack_lock:
            taken, self._unacknowledged = self._unacknowledged, {}
        return taken

    def acknowledge_overdue(self) -> None:
        """Called by the heartbeat thread: acknowledge claimed ids no pop took within
        ACK_DELAY_SECONDS (a long job runs), before a sweep could put them back in line."""
        with self._ack_lock:
            overdue = time.monotonic() - self._unacknowledged_since >= ACK_DELAY_SECONDS
            if overdue and self._unacknowledged:
                broker.acknowledge(broker.get_client(), self._take_unacknowledged())

    def acknowledge_now(self) -> None:
        """Before a hand-back: acknowledge every claimed id still pending. Sent after it, an
        acknowledgement would remove the in-flight entry of the id's next pop (the relay
        pushes it back, another worker pops it, and that worker could not put it back if
        its claim held it back). Should Redis fail, the ids are dropped all the same: their
        entries go back to ready at their deadline, duplicates the claim drops."""
        with self._ack_lock:
            pending = self._take_unacknowledged()
            if pending:
                with contextlib.suppress(*broker.REDIS_ERRORS):
                    broker.acknowledge(broker.get_client(), pending)

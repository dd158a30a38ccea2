"""A worker process: pop ids from Redis, claim them in PostgreSQL, run them, settle them.

Redis only suggests: every popped id goes through the compare-and-set claim,
so a stale or duplicated id degrades into a log line. Jobs run one at a time
in the main thread, under a soft time limit (SIGALRM raises inside the
handler, stopping CPU-bound code too); the supervisor kills the process if
the handler ignores it (see supervisor.py). With slots (``WORKER_SLOTS`` > 1),
async and io-bound handlers run beside it instead (see slots.py). A heartbeat
thread extends the leases of the jobs this process holds and does the upkeep
(due retries made ready, expired pops put back, controls re-read).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection

import redis
from django.db import DatabaseError, connection, transaction

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import controls, execution, selectors
from queue_app.engine.execution import ClaimedJob, Completion
from queue_app.exceptions import JobTimeLimitExceeded, LeaseLost, QueueError, WorkerShutdown
from queue_app.handlers import HandlerSpec, _current_job, _soft_deadline, get_handler
from queue_app.observability.logs import get_logger
from queue_app.observability.runs import observed_run
from queue_app.payloads import check_result
from queue_app.runtime.outages import OutageGuard
from queue_app.runtime.relay import fault_point_handler
from queue_app.runtime.running_job import RunningJob
from queue_app.runtime.slots import Slots

log = get_logger("queue_app.worker")

# The signals that ask a worker (and its supervisor) to stop after the current job.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
PROMOTE_EVERY_SECONDS = 0.5
# A job started later than this after its claim committed gets started_at set again at
# its start (twice the default claim-ahead, so a batch sized by it rarely needs a write).
START_SLACK_SECONDS = 0.1
# How often the heartbeat thread looks for a batch to release (WORKER_RELEASE_AFTER_SECONDS).
RELEASE_CHECK_SECONDS = 0.1
# How often a worker re-reads its queues' controls (pause, limits) for its pops. The
# claim reads them itself, so a stale view costs a put-back, never a wrong claim.
CONTROLS_REFRESH_SECONDS = 1.0
# The heartbeat thread does the upkeep and the controls refresh, off the way from a
# wake-up to a claim; the main loop does them only when they are this many times overdue.
MAIN_LOOP_UPKEEP_FACTOR = 3
# How long a worker leaves a queue alone after its claim held ids back because the
# queue was full (concurrency limit): its running jobs need time to finish.
HELD_BACK_PAUSE_SECONDS = 0.1
# The longest a claimed id stays in its in-flight set when no pop comes to acknowledge
# it (the heartbeat thread does then); well inside broker.INFLIGHT_SECONDS.
ACK_DELAY_SECONDS = 1.0


class _Fenced(Exception):
    """Rolls back an atomic handler whose completion the fence rejected."""


@dataclass(frozen=True)
class ChildReport:
    """What a worker process with slots tells its supervisor over the pipe: the jobs
    running in slots, id -> (fence, hard deadline). The job the main thread runs, and
    until when, goes in shared memory instead (``RunningJob``); which jobs a dead child
    held, the supervisor reads from PostgreSQL (``selectors.held_by``)."""

    slots: dict[str, tuple[int, float]]


class Worker:
    def __init__(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        burst: bool = False,
        with_scheduled: bool = False,
        supervisor_pipe: Connection | None = None,
        running: RunningJob | None = None,
        slots: int | None = None,
        max_jobs: int | None = None,
    ) -> None:
        settings = queue_settings()
        self.worker_id = worker_id
        self.queues = list(queues)
        # (queue, is strict FIFO) pairs: which Redis structure each served queue uses.
        self.queue_layouts = [(queue, settings.QUEUES[queue]) for queue in self.queues]
        self._fifo = dict(self.queue_layouts)
        self.burst = burst
        self.with_scheduled = with_scheduled
        self.supervisor_pipe = supervisor_pipe
        self.running = running
        # Slot threads report too: one message at a time on the pipe.
        self._pipe_lock = threading.Lock()
        self.slot_count = slots if slots is not None else settings.WORKER_SLOTS
        # After starting this many jobs the process stops as if asked to and is replaced
        # (runworker --max-jobs): a handler's leaked memory goes with it.
        self.max_jobs = max_jobs
        self.recycled = False
        self.slots: Slots | None = None  # started in run(), in the process that runs the jobs
        self._hard_deadline: float | None = None
        self.batch_size = settings.WORKER_BATCH_SIZE
        self.poll_seconds = settings.WORKER_POLL_SECONDS
        self.claim_ahead_seconds = settings.WORKER_CLAIM_AHEAD_SECONDS
        self.release_after_seconds = settings.WORKER_RELEASE_AFTER_SECONDS
        self.heartbeat_seconds = settings.HEARTBEAT_SECONDS
        # When this process last knew (from a claim or a check) that its unstarted jobs' leases held.
        self._leases_confirmed_at = 0.0
        self.stopping = False
        # The signal that asked this worker to stop; logged by the loop, not the handler.
        self.stop_signal: int | None = None
        # Claimed and not yet settled: id -> fence (read by the heartbeat thread).
        self.held: dict[str, int] = {}
        self.lost: set[str] = set()
        self.completions: list[Completion] = []
        # Claimed in the current batch and not started yet (the heartbeat thread may
        # release them while a handler runs: both threads take them under the lock).
        self.unstarted: list[ClaimedJob] = []
        self._batch_lock = threading.Lock()
        self._claimed_at = 0.0
        # Smoothed seconds per job in this process: sizes the next claim.
        self._seconds_per_job: float | None = None
        self._next_queue = 0
        self._controls: dict[str, controls.QueueControls] = {}
        self._controls_read_at = float("-inf")
        # queue -> monotonic time before which this worker does not pop it (held back).
        self._held_until: dict[str, float] = {}
        # Popped ids whose claim committed, not yet dropped from the in-flight sets (queue ->
        # ids): the next pop of the queue does it, or the heartbeat thread after ACK_DELAY_SECONDS.
        self._unacknowledged: dict[str, list[str]] = {}
        self._unacknowledged_since = 0.0
        # Held while acknowledgements are sent, not only taken: a hand-back waits for them
        # to land (see acknowledge_now). Reentrant: the senders take the ids under it too.
        self._ack_lock = threading.RLock()
        self._fault = fault_point_handler()
        self.current: ClaimedJob | None = None
        self.soft_deadline: float | None = None
        self.shutdown_deadline: float | None = None
        self._last_promote = 0.0
        self._limit = 0.0
        self._parent_pid = os.getppid()
        self.processed = 0

    # --- signals ------------------------------------------------------------

    def _install_signals(self) -> dict:
        handlers = {
            signal.SIGTERM: self._on_stop,
            signal.SIGINT: self._on_stop,
            signal.SIGALRM: self._on_alarm,
            signal.SIGUSR1: self._on_lease_lost,
        }
        previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
        # A supervisor forks its children with these blocked (see Supervisor._start): a
        # stop that came while this process started arrives now, to _on_stop.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        return previous

    def _on_stop(self, signum, frame) -> None:
        # No logging here: the handler may interrupt a log write, whose lock it would wait on.
        if self.stop_signal is None:
            self.stop_signal = signum
        self.stopping = True
        if self.current is not None and self.shutdown_deadline is None:
            self.shutdown_deadline = time.monotonic() + queue_settings().SHUTDOWN_GRACE_SECONDS
            self._arm_timer()

    def _arm_timer(self) -> None:
        deadlines = [d for d in (self.soft_deadline, self.shutdown_deadline) if d is not None]
        if deadlines:
            signal.setitimer(signal.ITIMER_REAL, max(min(deadlines) - time.monotonic(), 0.001))
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.soft_deadline = None

    def _on_alarm(self, signum, frame) -> None:
        if self.current is None or self.soft_deadline is None:
            return
        now = time.monotonic()
        if self.shutdown_deadline is not None and now >= self.shutdown_deadline:
            raise WorkerShutdown()
        if now >= self.soft_deadline:
            raise JobTimeLimitExceeded(f"time limit exceeded after {self._limit:g} s")
        self._arm_timer()

    def _on_lease_lost(self, signum, frame) -> None:
        if self.current is not None and self.soft_deadline is not None and self.current.id in self.lost:
            raise LeaseLost(f"job {self.current.id} was cancelled or rescued while running")

    def _tell_supervisor(self) -> None:
        """Tell the supervisor what runs until when (in shared memory; slot jobs over the pipe)."""
        current = self.current
        if self.running is not None:
            self.running.set(
                current and current.id, current and current.fence, current and self._hard_deadline
            )
        if self.supervisor_pipe is None or self.slots is None:
            return
        try:
            with self._pipe_lock:
                self.supervisor_pipe.send(ChildReport(slots=self.slots.deadlines()))
        except (OSError, ValueError):
            pass  # the supervisor is gone; it will not enforce limits anyway

    # --- the loop -------------------------------------------------------------

    def run(self) -> None:
        previous = self._install_signals()
        heartbeat = Heartbeat(self)
        guard = OutageGuard(f"worker {self.worker_id}")
        log.info(
            "worker_started",
            worker=self.worker_id,
            queues=self.queues,
            slots=self.slot_count,
            burst=self.burst,
        )
        if self.slot_count > 1:
            self.slots = Slots(self, self.slot_count)
        try:
            self._recover_previous_incarnation(guard)
            heartbeat.start()
            while not self.stopping:
                try:
                    if not self._step():
                        break
                    guard.recovered()
                except guard.errors as exc:
                    if isinstance(exc, DatabaseError):
                        connection.close()
                    elif self.completions:
                        # Redis is down but PostgreSQL may not be: settle what already ran.
                        with contextlib.suppress(*guard.errors):
                            self._flush_completions()
                    guard.failed(exc)
        finally:
            self.stopping = True
            if self.stop_signal is not None:
                stopped_by = signal.Signals(self.stop_signal).name
                log.info("worker_stopping", worker=self.worker_id, signal=stopped_by)
            self._finish(guard)
            heartbeat.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            log.info("worker_stopped", worker=self.worker_id, processed=self.processed)

    def _step(self) -> bool:
        """One round: upkeep, pop, claim, run. False when a burst worker is done."""
        if self.supervisor_pipe is not None and os.getppid() != self._parent_pid:
            log.warning("supervisor_gone", worker=self.worker_id)
            return False  # orphaned: stop cleanly rather than run unsupervised
        if self.unstarted:
            # The rest of a batch a store error interrupted: back to the queue, not counted.
            self._hand_back_unstarted("not started: a store error interrupted its batch")
        client = broker.get_client()
        self._upkeep(client, every=PROMOTE_EVERY_SECONDS * MAIN_LOOP_UPKEEP_FACTOR)
        self._refresh_controls(every=CONTROLS_REFRESH_SECONDS * MAIN_LOOP_UPKEEP_FACTOR)
        if self.slots is not None and not self.slots.free():
            # Every slot is busy: claim nothing (a claimed job is one no other worker can run).
            self._flush_completions()
            self.slots.wait_for_free(self.poll_seconds)
            return True
        popped = self._reserve(client)
        if not popped:
            # Nothing to claim, so no claim to carry them: finished jobs are written now.
            self._flush_completions()
            if self.burst and not self.held and not self._work_left():
                return False
            popped = self._wait_for_work(client)
            if not popped:
                return True
        # A crash from here until the claim commits leaves the ids in the in-flight
        # sets; the next sweep (any worker's upkeep) puts them back within seconds.
        if self._fault is not None:
            self._fault("worker.after_pop")
        self._process(client, popped)
        return True

    def _wait_for_work(self, client) -> dict[str, list[str]]:
        """Block for a wake token. Serving one queue that may be popped (and not on a
        cluster), pop in the same round trip: what the next step would pop first."""
        wait = self._wait_seconds()
        if len(self.queue_layouts) == 1 and not broker.is_cluster(client):
            [(queue, fifo)] = self.queue_layouts
            if self._may_pop(queue, time.monotonic()):
                ids = broker.wait_and_reserve(client, queue, fifo, self._claim_size(), wait)
                if ids and self.stopping:
                    # Stopped while waiting: the ids go back in place, unclaimed.
                    broker.put_back(client, queue, fifo, ids)
                    return {}
                return {queue: ids} if ids else {}
        broker.wait_for_work(client, self.queues, wait)
        return {}

    def _work_left(self) -> bool:
        """For a burst worker: a queued job that is due (or, with_scheduled, any queued job)
        in a queue that is not paused."""
        active = [queue for queue in self.queues if not self._controls[queue].paused]
        if not active:
            return False
        if self.with_scheduled:
            return selectors.has_queued(active)
        return selectors.has_due(active)

    def _refresh_controls(self, *, now: bool = False, every: float = CONTROLS_REFRESH_SECONDS) -> None:
        """Re-read the served queues' controls when ``every`` seconds old (or ``now``)."""
        if not now and time.monotonic() - self._controls_read_at < every:
            return
        self._controls = controls.queue_controls(self.queues)
        self._controls_read_at = time.monotonic()

    def _may_pop(self, queue: str, now: float) -> bool:
        return not self._controls[queue].paused and self._held_until.get(queue, 0.0) <= now

    def _wait_seconds(self) -> float:
        """How long an idle worker blocks for a wake token: until the first held-back
        queue may be popped again, at most WORKER_POLL_SECONDS."""
        now = time.monotonic()
        waits = [until - now for until in self._held_until.values() if until > now]
        return max(0.01, min([self.poll_seconds, *waits]))

    def _claim_size(self) -> int:
        """How many jobs to claim at once: as many as recent durations say will start
        within WORKER_CLAIM_AHEAD_SECONDS (one while nothing has run yet), at most the batch
        size; with slots, one per free slot; never more than ``max_jobs`` leaves to start.
        A claimed job is one no other worker can run."""
        limit = self.batch_size
        if self.max_jobs is not None:
            limit = min(limit, self.max_jobs - self.processed)
        if self.slots is not None:
            return max(1, min(limit, self.slots.free()))
        if self._seconds_per_job is None:
            return 1
        fit = int(self.claim_ahead_seconds / max(self._seconds_per_job, 1e-6))
        return max(1, min(limit, fit))

    def _reserve(self, client) -> dict[str, list[str]]:
        """Pop ids into the in-flight sets, queue by queue in round-robin order: each round
        starts at the next queue, so a flooded queue cannot starve the others."""
        want = self._claim_size()
        start = self._next_queue
        self._next_queue = (start + 1) % len(self.queue_layouts)
        popped: dict[str, list[str]] = {}
        now = time.monotonic()
        with self._ack_lock:
            # Should Redis fail here, ids taken and not acknowledged return to ready at their
            # deadline, as duplicates the claim drops.
            unacknowledged = self._take_unacknowledged()
            for queue, fifo in self.queue_layouts[start:] + self.queue_layouts[:start]:
                if not self._may_pop(queue, now):
                    continue  # paused, or full a moment ago: its ids stay in line
                ids = broker.reserve(client, queue, fifo, want, acknowledge=unacknowledged.pop(queue, ()))
                if ids:
                    popped[queue] = ids
                    want -= len(ids)
                    if want <= 0:
                        break
            if unacknowledged:
                broker.acknowledge(client, unacknowledged)
        return popped

    def _defer_acknowledgement(self, popped: dict[str, list[str]]) -> None:
        """Leave claimed ids for the next pop (or the heartbeat) to acknowledge."""
        with self._ack_lock:
            if not self._unacknowledged:
                self._unacknowledged_since = time.monotonic()
            for queue, ids in popped.items():
                if ids:
                    self._unacknowledged.setdefault(queue, []).extend(ids)

    def _take_unacknowledged(self) -> dict[str, list[str]]:
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

    def _process(self, client, popped: dict[str, list[str]]) -> None:
        ids = [job_id for queue_ids in popped.values() for job_id in queue_ids]
        # Taken before the claim: the new leases run at least LEASE_SECONDS from here.
        claim_started = time.monotonic()
        # The previous batch's completions and this claim share one commit.
        with self._batch_lock:
            written = list(self.completions)
        result = execution.claim(
            ids,
            worker_id=self.worker_id,
            queues={queue: self._controls[queue].limited for queue in popped},
            completions=written,
        )
        claimed = result.jobs
        self._leases_confirmed_at = claim_started
        self._claimed_at = claim_committed = time.monotonic()
        self._forget(written)
        try:
            if result.held_back:
                self._put_back_held(client, popped, result.held_back)
        except redis.RedisError as exc:
            # Unacknowledged ids return to ready at their deadline: duplicates the claim drops.
            log.warning("pop_not_acknowledged", worker=self.worker_id, error=str(exc)[:300])
        self._defer_acknowledgement(popped)
        for job in claimed:
            self.held[job.id] = job.fence
        with self._batch_lock:
            self.unstarted = list(claimed)
        unclaimed = set(ids) - {job.id for job in claimed}
        unclaimed -= {job_id for held in result.held_back.values() for job_id in held}
        if unclaimed:
            self._put_back_not_due(unclaimed)
        while True:
            with self._batch_lock:
                if not self.unstarted:
                    break
                if self.stopping:
                    self._hand_back_unstarted("worker stopping before the job started")
                    break
                job = self.unstarted.pop(0)
            if not self._still_holds(job):
                continue
            if self.slots is not None and self._start_in_slot(job, claim_committed):
                continue
            try:
                self.run_job(job, late=time.monotonic() - claim_committed > START_SLACK_SECONDS)
            except OutageGuard.errors:
                # Settling this job failed (a store is unreachable). Stop vouching for it: its
                # lease runs out and the reconciler counts the attempt as failed. Kept in held,
                # the heartbeat would keep the lease alive with nobody left to settle it.
                self.held.pop(job.id, None)
                raise
            self._started_one()

    def _started_one(self) -> None:
        """Count a started job; at ``max_jobs`` stop starting more (the rest of the batch goes back)."""
        self.processed += 1
        if self.max_jobs is not None and self.processed >= self.max_jobs and not self.stopping:
            log.info("worker_recycling", worker=self.worker_id, processed=self.processed)
            self.recycled = self.stopping = True

    def _put_back_held(self, client, popped: dict[str, list[str]], held_back: dict[str, list[str]]) -> None:
        """Return the ids the queue controls held back to their place in line (they are
        then not acknowledged), and leave their queues alone for a moment: a paused one
        until the controls say otherwise, a full or rate-limited one briefly."""
        fifo_by_queue = dict(self.queue_layouts)
        now = time.monotonic()
        for queue, held in held_back.items():
            broker.put_back(client, queue, fifo_by_queue[queue], held)
            put_back = set(held)
            popped[queue] = [job_id for job_id in popped[queue] if job_id not in put_back]
            self._held_until[queue] = now + HELD_BACK_PAUSE_SECONDS
        self._refresh_controls(now=True)
        for queue, state in self._controls.items():
            if queue in held_back and state.rate_limit:
                # About when the bucket holds a whole token again.
                self._held_until[queue] = now + min(1.0, max(HELD_BACK_PAUSE_SECONDS, 1 / state.rate_limit))

    def _still_holds(self, job: ClaimedJob) -> bool:
        """Whether the lease of the next job to start is still ours.

        Asked of PostgreSQL (extending the leases of every job not started yet) when
        the last confirmation is older than a heartbeat, or the heartbeat saw the lease
        go: a worker that was stopped for a while (SIGSTOP, a stall) must not start a
        job that was rescued meanwhile and may have been run, or completed, by another.
        Jobs whose lease is gone are dropped from the batch.
        """
        fresh = time.monotonic() - self._leases_confirmed_at < self.heartbeat_seconds
        if fresh and job.id not in self.lost:
            return True
        asked = time.monotonic()
        with self._batch_lock:
            pending = [job, *self.unstarted]
        still_held = execution.extend_leases(
            [(item.id, item.fence) for item in pending], worker_id=self.worker_id
        )
        self._leases_confirmed_at = asked
        for item in pending:
            if item.id not in still_held:
                log.warning("job_lease_lost_before_start", job_id=item.id, fence=item.fence)
                self.held.pop(item.id, None)
        with self._batch_lock:
            self.unstarted = [item for item in self.unstarted if item.id in still_held]
        return job.id in still_held

    def _start_in_slot(self, job: ClaimedJob, claim_committed: float) -> bool:
        """Start an async or io-bound job in a slot; False for a job the main thread runs."""
        try:
            spec = get_handler(job.type)
        except QueueError:
            return False  # run_job settles an unknown type
        if not spec.runs_in_slot:
            return False
        self.slots.start(job, spec, late=time.monotonic() - claim_committed > START_SLACK_SECONDS)
        self._started_one()
        return True

    def _hand_back_unstarted(self, reason: str) -> None:
        """Return the claimed jobs this process has not started (last first: see _hand_back);
        the fence makes it a no-op for any whose lease ran out meanwhile."""
        while self.unstarted:
            self._hand_back(self.unstarted[-1], reason)
            self.unstarted.pop()

    def release_batch(self) -> None:
        """Called by the heartbeat thread while a handler runs: once a claim is
        WORKER_RELEASE_AFTER_SECONDS old, the jobs of it not started yet go back to the
        queue (uncounted), so an idle worker runs them instead of them waiting behind a
        slow job, and the completions batched so far are written, so finished jobs do not
        show as processing for as long as the slow one runs."""
        if time.monotonic() - self._claimed_at < self.release_after_seconds:
            return
        with self._batch_lock:
            # A strict-FIFO queue's jobs stay: handed back, they would go to the head of the
            # list, but this worker, done with the slow job a moment later, could pop the
            # jobs behind them first.
            released = [job for job in self.unstarted if not self._fifo[job.queue]]
            # current is None between jobs: the main thread is settling or claiming.
            if self.current is None or not (released or self.completions):
                return
            self.unstarted = [job for job in self.unstarted if self._fifo[job.queue]]
            finished, self.completions = self.completions, []
        try:
            with transaction.atomic():
                execution.complete_jobs(finished)
        except BaseException:
            with self._batch_lock:
                self.completions = finished + self.completions  # written by the main thread later
                self.unstarted = released + self.unstarted  # not handed back: run here after all
            raise
        for completion in finished:
            self.held.pop(completion.job_id, None)
        for index, job in enumerate(released):
            try:
                self._hand_back(job, "released: the job claimed before it is still running")
            except BaseException:
                # Dropped from unstarted yet still held, they would keep their leases (and
                # wait) for as long as this process lives: they run here instead.
                with self._batch_lock:
                    self.unstarted = released[index:] + self.unstarted
                raise

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

    def background_upkeep(self) -> None:
        """Called by the heartbeat thread: the upkeep and controls refresh, which the main
        loop would otherwise do between a wake-up and its claim (a job's start waited)."""
        self._upkeep(broker.get_client())
        self._refresh_controls()

    def _upkeep(self, client, *, every: float = PROMOTE_EVERY_SECONDS) -> None:
        """Every ``every`` seconds: move due ids from retry sets to ready structures
        (priorities looked up in PostgreSQL), and put back popped ids nobody acknowledged."""
        if time.monotonic() - self._last_promote < every:
            return
        self._last_promote = time.monotonic()
        fifo_by_queue = dict(self.queue_layouts)
        for queue, fifo in self.queue_layouts:
            returned = broker.return_expired(client, queue, fifo)
            if returned:
                log.warning("popped_ids_returned", queue=queue, count=returned)
            taken = broker.take_due(client, queue)
            if not taken:
                continue
            # A crash between take_due and apply loses these ids from Redis only;
            # the reconciler re-adds queued jobs missing from every structure.
            rows = selectors.queued_for_promotion(taken)
            broker.apply(
                client,
                (
                    broker.Intent(
                        "enqueue",
                        job_id,
                        job_queue,
                        fifo_by_queue.get(job_queue, False),
                        broker.ready_score(priority_value),
                        broker.ready_member(job_id, enqueued_at),
                    )
                    for job_id, job_queue, priority_value, enqueued_at, _ in rows
                ),
            )
            log.debug("retry_promoted", queue=queue, count=len(rows))

    # --- running one job --------------------------------------------------------

    @observed_run
    def run_job(self, job: ClaimedJob, *, late: bool = False) -> None:
        """Run one claimed job and settle it. ``late``: it starts noticeably after its
        claim (which set started_at), so started_at is set again now."""
        started = time.monotonic()
        try:
            spec = get_handler(job.type)
        except QueueError as exc:
            self._settle_failure(
                job, execution.error_summary(exc), retry=False, error_class=execution.error_class_path(exc)
            )
            return
        if late:
            self.record_late_start(job)
        self._limit = spec.time_limit or queue_settings().DEFAULT_TIME_LIMIT_SECONDS
        self.current = job
        self.soft_deadline = time.monotonic() + self._limit
        self._hard_deadline = self.soft_deadline + queue_settings().HARD_TIME_LIMIT_GRACE_SECONDS
        self._tell_supervisor()
        token = _current_job.set(job)
        deadline_token = _soft_deadline.set(self.soft_deadline)
        log.debug("job_started", job_id=job.id, type=job.type, attempt=job.attempt, worker=self.worker_id)
        try:
            try:
                self._arm_timer()
                outcome = self._call(spec, job)
            finally:
                self._disarm()
        except _Fenced:
            execution.note_fenced(job.id, job.fence)
        except LeaseLost as exc:
            log.warning("job_lease_lost", job_id=job.id, attempt=job.attempt, reason=str(exc))
            self.held.pop(job.id, None)
        except WorkerShutdown:
            # The stop may have interrupted the handler inside a query, its connection still busy.
            self._start_from_a_usable_connection()
            self._hand_back(job, "worker shutdown grace period ended")
        except JobTimeLimitExceeded as exc:
            self._settle_failure(
                job,
                f"JobTimeLimitExceeded: {exc}",
                retry=True,
                error_class="queue_app.exceptions.JobTimeLimitExceeded",
            )
        except BaseException as exc:  # noqa: BLE001 - however a handler ends, the attempt counts
            # SystemExit, KeyboardInterrupt and GeneratorExit raised by a handler are its
            # failure too: letting them end the process would hand the job back uncounted,
            # to be claimed again forever (a poison job).
            retry = not isinstance(exc, spec.give_up_on)
            # The summary for the owner; the traceback (django.tasks reads it) kept beside it.
            error_class = execution.error_class_path(exc)
            self._settle_failure(
                job,
                execution.error_summary(exc),
                retry=retry,
                error_class=error_class,
                error_traceback="".join(traceback.format_exception(exc)),
            )
        else:
            if outcome is not None:
                with self._batch_lock:  # the heartbeat thread may be taking the list
                    self.completions.append(outcome)
            else:
                self.held.pop(job.id, None)
        finally:
            _current_job.reset(token)
            _soft_deadline.reset(deadline_token)
            self.current = None
            self._tell_supervisor()
            seconds = time.monotonic() - started
            previous = self._seconds_per_job
            self._seconds_per_job = seconds if previous is None else 0.8 * previous + 0.2 * seconds
            log.debug("job_finished", job_id=job.id, attempt=job.attempt, seconds=round(seconds, 4))

    def _call(self, spec: HandlerSpec, job: ClaimedJob) -> Completion | None:
        """Run the handler; returns a completion to batch, or None when already written."""
        if spec.is_async:
            # Without slots a coroutine runs here on a loop of its own; SIGALRM's
            # exception ends the loop, which cancels the coroutine.
            result = asyncio.run(spec.func(dict(job.payload)))
            self._disarm()
            check_result(result)
            return Completion(job.id, job.fence, result)
        if not spec.atomic:
            result = spec.func(dict(job.payload))
            self._disarm()
            check_result(result)
            return Completion(job.id, job.fence, result)
        # Atomic mode: the handler's writes commit with the completion, or not at all.
        with transaction.atomic():
            result = spec.func(dict(job.payload))
            self._disarm()
            check_result(result)
            if not execution.complete_jobs([Completion(job.id, job.fence, result)]):
                raise _Fenced()
        self.held.pop(job.id, None)
        return None

    def _settle_failure(
        self, job: ClaimedJob, error: str, *, retry: bool, error_class: str = "", error_traceback: str = ""
    ) -> None:
        # The handler may have closed or broken this process's connection; the failure
        # must still be written, so start from a working one.
        self._start_from_a_usable_connection()
        execution.fail_job(
            job.id, job.fence, error, retry=retry, error_class=error_class, traceback=error_traceback
        )
        self.held.pop(job.id, None)

    @staticmethod
    def record_late_start(job: ClaimedJob) -> None:
        """started_at is a job's start, not its claim. Best effort: with PostgreSQL unreachable
        the job runs anyway (its claim is committed, its completion waits for the store), where
        failing here would drop it to wait out its lease and be charged an attempt it never
        had; started_at then stays at the claim."""
        try:
            execution.mark_started(job.id, job.fence)
        except OutageGuard.errors as exc:
            log.warning("job_start_time_not_recorded", job_id=job.id, error=str(exc)[:300])
            connection.close()  # the next query connects afresh, not through the broken one

    @staticmethod
    def _start_from_a_usable_connection() -> None:
        """The handler may have closed or broken this process's connection, or been stopped
        inside a query: its connection still busy, the query still running on the server."""
        raw = connection.connection
        if raw is None or connection.is_usable():
            return
        with contextlib.suppress(Exception):  # a broken connection has no query to cancel
            raw.cancel_safe(timeout=2)  # the server stops it instead of finishing it for no one
        connection.close()

    def _hand_back(self, job: ClaimedJob, reason: str) -> None:
        """Each hand-back puts a strict-FIFO job at the head of its list, so a batch goes
        back last first and leaves its jobs there in claim order. Pending acknowledgements
        go first: once handed back, the id may be popped again."""
        self.acknowledge_now()
        execution.hand_back_job(job.id, job.fence, worker_id=self.worker_id, reason=reason)
        self.held.pop(job.id, None)

    def _write_completions(self) -> list[Completion]:
        """Write batched completions (committed, unless in a caller's transaction); returns them."""
        with self._batch_lock:
            pending = list(self.completions)
        if pending:
            execution.complete_jobs(pending)
        return pending

    def _forget(self, written: list[Completion]) -> None:
        """After the commit: the jobs are settled. On an outage nothing is forgotten and
        the completions are written on the next try."""
        if not written:
            return
        with self._batch_lock:
            done = {id(completion) for completion in written}
            self.completions = [c for c in self.completions if id(c) not in done]
        for completion in written:
            self.held.pop(completion.job_id, None)

    def _flush_completions(self) -> None:
        self._forget(self._write_completions())

    # --- start-up and shutdown ------------------------------------------------------

    def _recover_previous_incarnation(self, guard: OutageGuard) -> None:
        """Jobs this identity still holds belong to a dead earlier process: settle them now."""
        while not self.stopping:
            try:
                for job_id, fence in selectors.held_by(self.worker_id):
                    log.warning("job_recovered_from_previous_incarnation", job_id=job_id, fence=fence)
                    execution.fail_job(
                        job_id,
                        fence,
                        "WorkerProcessDied: worker restarted: its previous process died",
                        retry=True,
                        error_class="queue_app.exceptions.WorkerProcessDied",
                    )
                return
            except guard.errors as exc:
                connection.close()
                guard.failed(exc)

    def _finish(self, guard: OutageGuard) -> None:
        """Clean shutdown: no job left in processing by this worker."""
        if self.slots is not None:
            if self.recycled:
                # Recycling is no hurry: its slot jobs end as they would have (their time limits
                # bound them), unless a stop signal comes meanwhile.
                while self.stop_signal is None and not self.slots.wait_idle(1.0):
                    pass
            # Slot jobs finish within the grace, else go back with what is still held below.
            self.slots.drain(queue_settings().SHUTDOWN_GRACE_SECONDS)
        # Before the hand-backs below (see acknowledge_now).
        self.acknowledge_now()
        for _ in range(20):
            try:
                self._flush_completions()
                for job_id, fence in reversed(list(self.held.items())):  # last claimed first
                    execution.hand_back_job(
                        job_id, fence, worker_id=self.worker_id, reason="worker stopped before running it"
                    )
                    self.held.pop(job_id, None)
                return
            except guard.errors as exc:
                connection.close()
                guard.failed(exc)
        log.error("worker_exit_with_unsettled_jobs", held=list(self.held), worker=self.worker_id)


class Heartbeat(threading.Thread):
    """Extends the leases this worker holds, on its own database connection, releases
    the unstarted rest of a batch that waits behind a slow job, and does the upkeep
    (also while a long job runs)."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name=f"heartbeat {worker.worker_id}", daemon=True)
        self.worker = worker
        self.interval = queue_settings().HEARTBEAT_SECONDS
        self._stopped = threading.Event()

    def run(self) -> None:
        next_beat = time.monotonic() + self.interval
        try:
            while not self._stopped.wait(RELEASE_CHECK_SECONDS):
                try:
                    self.worker.acknowledge_overdue()
                    self.worker.release_batch()
                except OutageGuard.errors as exc:
                    # What was not handed back keeps its lease; the heartbeat below stops
                    # extending nothing it no longer holds, and the fence absorbs the rest.
                    log.warning("release_failed", worker=self.worker.worker_id, error=str(exc)[:300])
                    connection.close()
                try:
                    self.worker.background_upkeep()
                except OutageGuard.errors as exc:
                    # The main loop does it once it is overdue, and meets the outage itself.
                    log.debug("upkeep_failed", worker=self.worker.worker_id, error=str(exc)[:300])
                    connection.close()
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.interval
                    self.beat()
        finally:
            connection.close()

    def beat(self) -> None:
        worker = self.worker
        held = list(worker.held.copy().items())
        if not held:
            return
        try:
            still_held = execution.extend_leases(held, worker_id=worker.worker_id)
        except OutageGuard.errors as exc:
            log.warning("heartbeat_failed", worker=worker.worker_id, error=str(exc)[:300])
            connection.close()
            return
        lost = {job_id for job_id, _ in held if job_id not in still_held and job_id in worker.held}
        if not lost:
            return
        worker.lost |= lost
        log.warning("lease_lost", worker=worker.worker_id, job_ids=sorted(lost))
        if worker.slots is not None:
            worker.slots.cancel(lost, "lease lost")
        current = worker.current
        if current is not None and current.id in lost:
            os.kill(os.getpid(), signal.SIGUSR1)

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=self.interval + 5)

"""A worker process: pop ids from Redis, claim them in PostgreSQL, run them, settle them.

Redis only suggests: every popped id goes through the compare-and-set claim,
so a stale or duplicated id degrades into a log line. Jobs run one at a time
in the main thread, under a soft time limit (SIGALRM raises inside the
handler, stopping CPU-bound code too); the supervisor kills the process if
the handler ignores it (see supervisor.py). A heartbeat thread extends the
leases of the jobs this process holds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import structlog
from django.db import DatabaseError, connection, transaction

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import execution, selectors
from queue_app.engine.execution import ClaimedJob, Completion
from queue_app.exceptions import JobTimeLimitExceeded, LeaseLost, QueueError, WorkerShutdown
from queue_app.handlers import HandlerSpec, _current_job, get_handler
from queue_app.observability.runs import observed_run
from queue_app.payloads import check_json
from queue_app.runtime.outages import OutageGuard
from queue_app.states import PRIORITY_TIER

log = structlog.get_logger("queue_app.worker")

PROMOTE_EVERY_SECONDS = 0.5
MAX_RESULT_BYTES = 10 * 1024 * 1024


class _Fenced(Exception):
    """Rolls back an atomic handler whose completion the fence rejected."""


class Worker:
    def __init__(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        burst: bool = False,
        report=None,
    ) -> None:
        settings = queue_settings()
        self.worker_id = worker_id
        self.queues = list(queues)
        self.modes = [(queue, settings.QUEUES[queue]) for queue in self.queues]
        self.burst = burst
        self.report = report  # pipe to the supervisor, or None
        self.batch_size = settings.WORKER_BATCH_SIZE
        self.poll_seconds = settings.WORKER_POLL_SECONDS
        self.heartbeat_seconds = settings.HEARTBEAT_SECONDS
        # When this process last knew (from a claim or a check) that its unstarted jobs' leases held.
        self._leases_confirmed_at = 0.0
        self.stopping = False
        # Claimed and not yet settled: id -> attempt (read by the heartbeat thread).
        self.held: dict[str, int] = {}
        self.lost: set[str] = set()
        self.completions: list[Completion] = []
        # Claimed in the current batch and not started yet.
        self.unstarted: list[ClaimedJob] = []
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
        return {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}

    def _on_stop(self, signum, frame) -> None:
        if not self.stopping:
            log.info("worker_stopping", worker=self.worker_id, signal=signal.Signals(signum).name)
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

    def _report_state(self, *, with_held: bool = False) -> None:
        """Tell the supervisor what runs until when; the held set only after a claim
        (a stale set is harmless: handing back a settled job is a fenced no-op)."""
        if self.report is None:
            return
        current = self.current
        hard_deadline = (
            time.monotonic() + self._limit + queue_settings().HARD_TIME_LIMIT_GRACE_SECONDS
            if current is not None
            else None
        )
        try:
            self.report.send(
                (
                    current.id if current else None,
                    current.attempt if current else None,
                    hard_deadline,
                    dict(self.held) if with_held else None,
                )
            )
        except (OSError, ValueError):
            pass  # the supervisor is gone; it will not enforce limits anyway

    # --- the loop -------------------------------------------------------------

    def run(self) -> None:
        previous = self._install_signals()
        heartbeat = Heartbeat(self)
        guard = OutageGuard(f"worker {self.worker_id}")
        log.info("worker_started", worker=self.worker_id, queues=self.queues, burst=self.burst)
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
            self._finish(guard)
            heartbeat.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            log.info("worker_stopped", worker=self.worker_id, processed=self.processed)

    def _step(self) -> bool:
        """One round: flush, promote, pop, claim, run. False when a burst worker is done."""
        if self.report is not None and os.getppid() != self._parent_pid:
            log.warning("supervisor_gone", worker=self.worker_id)
            return False  # orphaned: stop cleanly rather than run unsupervised
        if self.unstarted:
            # The rest of a batch a store error interrupted: back to the queue, not counted.
            self._hand_back_unstarted("not started: a store error interrupted its batch")
        client = broker.get_client()
        self._promote_due(client)
        ids = broker.pop_ready(client, self.modes, self.batch_size)
        if not ids:
            self._flush_completions()
            if self.burst and not self.held and not selectors.has_queued(self.queues):
                return False
            ids = broker.wait_ready(client, self.modes, self.poll_seconds)
            if not ids:
                return True
        # A crash (or outage) from here until the claim commits loses these ids from
        # Redis only; the jobs are still queued in PostgreSQL and the reconciler re-adds them.
        self._process(ids)
        return True

    def _process(self, ids: list[str]) -> None:
        # Taken before the claim: the new leases run at least LEASE_SECONDS from here.
        claim_started = time.monotonic()
        # The previous batch's completions and this claim share one commit.
        with transaction.atomic():
            written = self._write_completions()
            claimed = execution.claim_jobs(ids, worker_id=self.worker_id)
        self._leases_confirmed_at = claim_started
        self._forget(written)
        for job in claimed:
            self.held[job.id] = job.attempt
        self.unstarted = list(claimed)
        unclaimed = set(ids) - {job.id for job in claimed}
        if unclaimed:
            self._put_back_not_due(unclaimed)
        self._report_state(with_held=True)
        while self.unstarted:
            if self.stopping:
                self._hand_back_unstarted("worker stopping before the job started")
                break
            job = self.unstarted[0]
            if not self._still_holds(job):
                continue
            self.unstarted.pop(0)
            try:
                self.run_job(job)
            except OutageGuard.errors:
                # Settling this job failed (a store is unreachable). Stop vouching for it: its
                # lease runs out and the reconciler counts the attempt as failed. Kept in held,
                # the heartbeat would keep the lease alive with nobody left to settle it.
                self.held.pop(job.id, None)
                raise
            self.processed += 1

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
        still_held = execution.extend_leases(
            [(pending.id, pending.attempt) for pending in self.unstarted], worker_id=self.worker_id
        )
        self._leases_confirmed_at = asked
        for pending in self.unstarted:
            if pending.id not in still_held:
                log.warning("job_lease_lost_before_start", job_id=pending.id, attempt=pending.attempt)
                self.held.pop(pending.id, None)
        self.unstarted = [pending for pending in self.unstarted if pending.id in still_held]
        return job.id in still_held

    def _hand_back_unstarted(self, reason: str) -> None:
        """Return the claimed jobs this process has not started; the fence makes it a no-op
        for any whose lease ran out meanwhile."""
        while self.unstarted:
            self._hand_back(self.unstarted[0], reason)
            self.unstarted.pop(0)

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

    def _promote_due(self, client) -> None:
        """Move due ids from retry sets to ready structures (tiers looked up in PostgreSQL)."""
        if time.monotonic() - self._last_promote < PROMOTE_EVERY_SECONDS:
            return
        self._last_promote = time.monotonic()
        fifo = dict(self.modes)
        for queue in self.queues:
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
                        fifo.get(job_queue, False),
                        broker.priority_score(PRIORITY_TIER[priority], enqueued_at),
                    )
                    for job_id, job_queue, priority, enqueued_at, _ in rows
                ),
            )
            log.debug("retry_promoted", queue=queue, count=len(rows))

    # --- running one job --------------------------------------------------------

    @observed_run
    def run_job(self, job: ClaimedJob) -> None:
        try:
            spec = get_handler(job.type)
        except QueueError as exc:
            self._settle_failure(job, str(exc), retry=False)
            return
        self._limit = spec.time_limit or queue_settings().DEFAULT_TIME_LIMIT_SECONDS
        self.current = job
        self.soft_deadline = time.monotonic() + self._limit
        self._report_state()
        token = _current_job.set(job)
        started = time.monotonic()
        log.debug("job_started", job_id=job.id, type=job.type, attempt=job.attempt, worker=self.worker_id)
        try:
            try:
                self._arm_timer()
                outcome = self._call(spec, job)
            finally:
                self._disarm()
        except _Fenced:
            execution.note_fenced(job.id, job.attempt)
        except LeaseLost as exc:
            log.warning("job_lease_lost", job_id=job.id, attempt=job.attempt, reason=str(exc))
            self.held.pop(job.id, None)
        except WorkerShutdown:
            self._hand_back(job, "worker shutdown grace period ended")
        except JobTimeLimitExceeded as exc:
            self._settle_failure(
                job,
                f"JobTimeLimitExceeded: {exc}",
                retry=True,
                error_class="queue_app.exceptions.JobTimeLimitExceeded",
            )
        except Exception as exc:  # noqa: BLE001 - any handler error is the job's failure
            retry = not isinstance(exc, spec.give_up_on)
            # The full traceback, as traceback.format_exc() gives it (django.tasks reads it).
            error_class = f"{type(exc).__module__}.{type(exc).__qualname__}"
            self._settle_failure(
                job, "".join(traceback.format_exception(exc)), retry=retry, error_class=error_class
            )
        else:
            if outcome is not None:
                self.completions.append(outcome)
            else:
                self.held.pop(job.id, None)
        finally:
            _current_job.reset(token)
            self.current = None
            self._report_state()
            log.debug(
                "job_finished",
                job_id=job.id,
                attempt=job.attempt,
                seconds=round(time.monotonic() - started, 4),
            )

    def _call(self, spec: HandlerSpec, job: ClaimedJob) -> Completion | None:
        """Run the handler; returns a completion to batch, or None when already written."""
        if not spec.atomic:
            result = spec.func(dict(job.payload))
            self._disarm()
            self._check_result(result)
            return Completion(job.id, job.attempt, result)
        # Atomic mode: the handler's writes commit with the completion, or not at all.
        with transaction.atomic():
            result = spec.func(dict(job.payload))
            self._disarm()
            self._check_result(result)
            if not execution.complete_jobs([Completion(job.id, job.attempt, result)]):
                raise _Fenced()
        self.held.pop(job.id, None)
        return None

    @staticmethod
    def _check_result(result: Any) -> None:
        check_json(result, field="result", max_bytes=MAX_RESULT_BYTES, max_depth=64)

    def _settle_failure(self, job: ClaimedJob, error: str, *, retry: bool, error_class: str = "") -> None:
        execution.fail_job(job.id, job.attempt, error, retry=retry, error_class=error_class)
        self.held.pop(job.id, None)

    def _hand_back(self, job: ClaimedJob, reason: str) -> None:
        execution.hand_back_job(job.id, job.attempt, worker_id=self.worker_id, reason=reason)
        self.held.pop(job.id, None)

    def _write_completions(self) -> list[Completion]:
        """Write batched completions (the caller commits); returns what was written."""
        pending = list(self.completions)
        if pending:
            execution.complete_jobs(pending)
        return pending

    def _forget(self, written: list[Completion]) -> None:
        """After the commit: the jobs are settled. On an outage nothing is forgotten and
        the completions are written on the next try."""
        self.completions = self.completions[len(written) :]
        for completion in written:
            self.held.pop(completion.job_id, None)

    def _flush_completions(self) -> None:
        with transaction.atomic():
            written = self._write_completions()
        self._forget(written)

    # --- start-up and shutdown ------------------------------------------------------

    def _recover_previous_incarnation(self, guard: OutageGuard) -> None:
        """Jobs this identity still holds belong to a dead earlier process: settle them now."""
        while not self.stopping:
            try:
                for job_id, attempt in selectors.held_by(self.worker_id):
                    log.warning("job_recovered_from_previous_incarnation", job_id=job_id, attempt=attempt)
                    execution.fail_job(
                        job_id, attempt, "worker restarted: its previous process died", retry=True
                    )
                return
            except guard.errors as exc:
                connection.close()
                guard.failed(exc)

    def _finish(self, guard: OutageGuard) -> None:
        """Clean shutdown: no job left in processing by this worker."""
        for _ in range(20):
            try:
                self._flush_completions()
                for job_id, attempt in list(self.held.items()):
                    execution.hand_back_job(
                        job_id, attempt, worker_id=self.worker_id, reason="worker stopped before running it"
                    )
                    self.held.pop(job_id, None)
                return
            except guard.errors as exc:
                connection.close()
                guard.failed(exc)
        log.error("worker_exit_with_unsettled_jobs", held=list(self.held), worker=self.worker_id)


class Heartbeat(threading.Thread):
    """Extends the leases this worker holds, on its own database connection."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name=f"heartbeat {worker.worker_id}", daemon=True)
        self.worker = worker
        self.interval = queue_settings().HEARTBEAT_SECONDS
        self._stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopped.wait(self.interval):
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
        current = worker.current
        if current is not None and current.id in lost:
            os.kill(os.getpid(), signal.SIGUSR1)

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=self.interval + 5)

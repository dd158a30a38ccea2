"""A worker process: the loop that ties its rooms together.

- the producer (producer.py) decides what to claim and takes it from Redis;
- the claim in PostgreSQL decides; what was claimed goes to the holdings
  (holdings.py), keyed by job id and fence until settled;
- the executor (executor.py) runs each attempt and settles it: here in the main
  thread, one at a time, under a soft time limit (SIGALRM raises inside the
  handler, stopping CPU-bound code too; the supervisor kills the process if the
  handler ignores it, see supervisor.py); with slots (``WORKER_SLOTS`` > 1), async
  and io-bound handlers beside it (slots.py);
- the heartbeat thread (heartbeat.py) keeps the leases, does the side-work and
  stands for the queues' maintenance (maintenance.py: one elected leader per queue);
  the cancel listener (cancel_listener.py) hears cancels at once.

An attempt asked to stop (cancel requested, lease lost) is interrupted with an
``AttemptStopped`` exception, which ``except Exception`` cannot swallow, and
again every second while it runs on.

Over 500 lines on purpose: the signal handlers, the loop and the shutdown share the
state of the process's main thread (its attempt, deadlines, stop request), which only
this class changes; every room the loop calls lives in a module of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from django.db import DatabaseError, connection, transaction

from queue_app import broker, conf
from queue_app.conf import queue_settings
from queue_app.engine import execution, selectors
from queue_app.exceptions import JobTimeLimitExceeded, LeaseLost, QueueError, WorkerShutdown
from queue_app.handlers import HandlerSpec, get_handler
from queue_app.observability.logs import get_logger
from queue_app.payloads import check_result
from queue_app.runtime.cancel_listener import CancelListener
from queue_app.runtime.executor import Executor
from queue_app.runtime.heartbeat import Heartbeat
from queue_app.runtime.holdings import Attempt, Holdings, lease_sure_seconds
from queue_app.runtime.outages import OutageGuard
from queue_app.runtime.producer import CONTROLS_REFRESH_SECONDS, Producer
from queue_app.runtime.running_job import RunningJob
from queue_app.runtime.slots import Slots

log = get_logger(__name__)

# The signals that ask a worker (and its supervisor) to stop after the current job.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
# A job started later than this after its claim committed gets started_at set again at
# its start (twice the default claim-ahead, so a batch sized by it rarely needs a write).
START_SLACK_SECONDS = 0.1
# The heartbeat thread refreshes the controls, off the way from a wake-up to a claim;
# the main loop does it only when it is this many times overdue.
MAIN_LOOP_UPKEEP_FACTOR = 3


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
        self.holdings = Holdings()
        self.producer = Producer(worker_id=worker_id, queues=self.queues, max_jobs=max_jobs)
        self.executor = Executor(
            worker_id=worker_id, holdings=self.holdings, before_hand_back=self.producer.acknowledge_now
        )
        self.slots: Slots | None = None  # started in run(), in the process that runs the jobs
        self._main = MainThread(self)
        self.release_after_seconds = settings.WORKER_RELEASE_AFTER_SECONDS
        self._claimed_at = 0.0
        self.stopping = False
        # The signal that asked this worker to stop; logged by the loop, not the handler.
        self.stop_signal: int | None = None
        # Jobs an earlier process of this name left running, settled once their leases end.
        self._previous: list[tuple[str, int]] = []
        self._fault = conf.fault_point_handler()
        # The attempt the main thread runs, and its deadlines (monotonic).
        self.current: Attempt | None = None
        self.soft_deadline: float | None = None
        self.shutdown_deadline: float | None = None
        self._hard_deadline: float | None = None
        self._limit = 0.0
        self._parent_pid = os.getppid()
        self.processed = 0

    # --- signals ------------------------------------------------------------

    def _install_signals(self) -> dict:
        handlers = {
            signal.SIGTERM: self._on_stop,
            signal.SIGINT: self._on_stop,
            signal.SIGALRM: self._on_alarm,
            signal.SIGUSR1: self._on_interrupt,
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

    def _on_interrupt(self, signum, frame) -> None:
        """SIGUSR1: the main thread's attempt was asked to stop (cancel, lost lease)."""
        attempt = self.current
        # soft_deadline is set only while the handler runs: never raise into the settling.
        if attempt is not None and self.soft_deadline is not None and attempt.stop is not None:
            raise attempt.stop_error()

    def interrupt_main_thread(self) -> None:
        os.kill(os.getpid(), signal.SIGUSR1)

    def tell_supervisor(self) -> None:
        """Tell the supervisor what runs until when (in shared memory; slot jobs over the pipe)."""
        current = self.current and self.current.job
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
        listener = CancelListener(self.holdings, self.worker_id)
        guard = OutageGuard(f"worker {self.worker_id}")
        log.info(
            "worker_started",
            worker=self.worker_id,
            queues=self.queues,
            slots=self.slot_count,
            burst=self.burst,
        )
        if self.slot_count > 1:
            self.slots = Slots(
                executor=self.executor,
                count=self.slot_count,
                worker_id=self.worker_id,
                on_change=self.tell_supervisor,
            )
        try:
            self._recover_previous_incarnation(guard)
            heartbeat.start()
            listener.start()
            while not self.stopping:
                try:
                    if not self._step():
                        break
                    guard.recovered()
                except guard.errors as exc:
                    if isinstance(exc, DatabaseError):
                        connection.close()
                    elif self.holdings.completions():
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
            listener.stop()
            heartbeat.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            log.info("worker_stopped", worker=self.worker_id, processed=self.processed)

    def _step(self) -> bool:
        """One round: upkeep, pop, claim, run. False when a burst worker is done."""
        if self.supervisor_pipe is not None and os.getppid() != self._parent_pid:
            log.warning("supervisor_gone", worker=self.worker_id)
            return False  # orphaned: stop cleanly rather than run unsupervised
        if self.holdings.unstarted():
            # The rest of a batch a store error interrupted: back to the queue, not counted.
            self._hand_back_unstarted("not started: a store error interrupted its batch")
        client = broker.get_client()
        self.producer.refresh_controls(every=CONTROLS_REFRESH_SECONDS * MAIN_LOOP_UPKEEP_FACTOR)
        if self.slots is not None and not self.slots.free():
            # Every slot is busy: claim nothing (a claimed job is one no other worker can run).
            self._flush_completions()
            self.slots.wait_for_free(self.producer.poll_seconds)
            return True
        popped = self.producer.reserve(client, self._claim_size())
        if not popped:
            # Nothing to claim, so no claim to carry them: finished jobs are written now.
            self._flush_completions()
            if (
                self.burst
                and not len(self.holdings)
                and not self.producer.work_left(with_scheduled=self.with_scheduled)
            ):
                return False
            popped = self.producer.wait_for_work(client, self._claim_size(), lambda: self.stopping)
            if not popped:
                return True
        # A crash from here until the claim commits leaves the ids in the in-flight
        # sets; the queue's maintenance leader puts them back within seconds.
        if self._fault is not None:
            self._fault("worker.after_pop")
        self._process(client, popped)
        return True

    def _claim_size(self) -> int:
        return self.producer.claim_size(
            started=self.processed, free_slots=self.slots.free() if self.slots is not None else None
        )

    def _process(self, client, popped: dict[str, list[str]]) -> None:
        # Taken before the claim: the new leases run at least LEASE_SECONDS from here.
        claim_started = time.monotonic()
        # The previous batch's completions and this claim share one commit.
        written = self._take_completions()
        try:
            claim = self.producer.claim(popped, [completion for _, completion in written])
        except BaseException:
            self._not_written(written)
            raise
        self._claimed_at = claim_committed = time.monotonic()
        self._written(written)
        self.producer.after_claim(client, popped, claim)
        self.holdings.claimed(claim.jobs, asked_at=claim_started)
        while True:
            if self.stopping:
                self._hand_back_unstarted("worker stopping before the job started")
                break
            attempt = self.holdings.next_unstarted()
            if attempt is None:
                break
            if not self._still_holds(attempt):
                continue
            late = time.monotonic() - claim_committed > START_SLACK_SECONDS
            if self._fault is not None:
                self._fault("worker.before_start")  # frozen here, it must not start a lost job
            if self.slots is not None and self._start_in_slot(attempt, late):
                continue
            self.producer.job_took(self.executor.run(attempt, self._main, late=late, batch=True))
            self._started_one()

    def _started_one(self) -> None:
        """Count a started job; at ``max_jobs`` stop starting more (the rest of the batch goes back)."""
        self.processed += 1
        if self.max_jobs is not None and self.processed >= self.max_jobs and not self.stopping:
            log.info("worker_recycling", worker=self.worker_id, processed=self.processed)
            self.recycled = self.stopping = True

    def _still_holds(self, attempt: Attempt) -> bool:
        """Whether the lease of the next job to start is still ours.

        Asked of PostgreSQL (extending the leases of every job not started yet) when
        its last confirmation is older than a heartbeat, or the heartbeat saw the lease
        go: a worker that was stopped for a while (SIGSTOP, a stall) must not start a
        job that was rescued meanwhile and may have been run, or completed, by another.
        Jobs whose lease is gone are dropped from the batch; jobs asked to cancel are
        confirmed cancelled by the executor, unrun. (A stall after this check is the
        executor's to catch: see ``lease_start_limit``.)
        """
        if attempt.lease_age() < lease_sure_seconds() and attempt.stop is not LeaseLost:
            return True
        asked = time.monotonic()
        pending = [attempt, *self.holdings.unstarted()]
        statuses = execution.extend_leases([item.key for item in pending], worker_id=self.worker_id)
        self.holdings.confirm([item.key for item in pending if item.job.id in statuses], asked)
        gone = [item for item in pending if item.job.id not in statuses]
        for item in gone:
            log.warning("job_lease_lost_before_start", job_id=item.job.id, fence=item.job.fence)
            self.holdings.settled(item)
        self.holdings.take_unstarted(lambda item: item in gone)
        return attempt not in gone

    def _start_in_slot(self, attempt: Attempt, late: bool) -> bool:
        """Start an async or io-bound job in a slot; False for a job the main thread runs."""
        try:
            spec = get_handler(attempt.job.type)
        except QueueError:
            return False  # the executor settles an unknown type
        if not spec.runs_in_slot:
            return False
        self.slots.start(attempt, late=late)
        self._started_one()
        return True

    def _hand_back_unstarted(self, reason: str) -> None:
        """Return the claimed jobs this process has not started, last first (each hand-back
        puts a strict-FIFO job at the head of its list, so they end there in claim order);
        the fence makes it a no-op for any whose lease ran out meanwhile."""
        for attempt in reversed(self.holdings.take_unstarted()):
            self.executor.hand_back(attempt, reason)

    def release_batch(self) -> None:
        """Called by the heartbeat thread while a handler runs: once a claim is
        WORKER_RELEASE_AFTER_SECONDS old, the jobs of it not started yet go back to the
        queue (uncounted), so an idle worker runs them instead of them waiting behind a
        slow job, and the completions batched so far are written, so finished jobs do not
        show as processing for as long as the slow one runs."""
        if time.monotonic() - self._claimed_at < self.release_after_seconds:
            return
        # current is None between jobs: the main thread is settling or claiming.
        if self.current is None:
            return
        # A strict-FIFO queue's jobs stay: handed back, they would go to the head of the
        # list, but this worker, done with the slow job a moment later, could pop the
        # jobs behind them first.
        released = self.holdings.take_unstarted(lambda attempt: not self.producer.fifo[attempt.job.queue])
        finished = self._take_completions()
        if not (released or finished):
            return
        try:
            with transaction.atomic():
                execution.complete_jobs([completion for _, completion in finished])
        except BaseException:
            self._not_written(finished)  # written by the main thread later
            self.holdings.put_unstarted_back(released)  # not handed back: run here after all
            raise
        self._written(finished)
        for index, attempt in enumerate(released):
            try:
                self.executor.hand_back(attempt, "released: the job claimed before it is still running")
            except BaseException:
                # Dropped from the batch yet still held, they would keep their leases (and
                # wait) for as long as this process lives: they run here instead.
                self.holdings.put_unstarted_back(released[index:])
                raise

    # --- batched completions ---------------------------------------------------------

    def _take_completions(self) -> list:
        """The batched completions, taken to be written (their attempts now settling, so
        the heartbeat neither extends nor reports them while the write is under way)."""
        taken = self.holdings.take_completions()
        for attempt, _ in taken:
            attempt.settling = True
        return taken

    def _not_written(self, taken: list) -> None:
        """A write that failed: the completions go back, to be written on the next try."""
        for attempt, _ in taken:
            attempt.settling = False
        self.holdings.put_completions_back(taken)

    def _written(self, taken: list) -> None:
        for attempt, _ in taken:
            self.holdings.settled(attempt)

    def _flush_completions(self) -> None:
        taken = self._take_completions()
        if not taken:
            return
        try:
            execution.complete_jobs([completion for _, completion in taken])
        except BaseException:
            self._not_written(taken)
            raise
        self._written(taken)

    # --- upkeep ----------------------------------------------------------------------

    def background_upkeep(self) -> None:
        """Called by the heartbeat thread: the controls refresh, which the main loop
        would otherwise do between a wake-up and its claim (a job's start waited)."""
        self.producer.refresh_controls()

    # --- start-up and shutdown ------------------------------------------------------

    def _recover_previous_incarnation(self, guard: OutageGuard) -> None:
        """Jobs this name still holds belong to an earlier process of it: settle them once
        their leases have run out. Not before: the earlier process may still be running
        them (cut off from PostgreSQL, its session already gone), and a job settled under
        it would run twice at once. Those left now are settled by the heartbeat later."""
        while not self.stopping:
            try:
                self._previous = [
                    (job_id, fence) for job_id, fence, _ in selectors.held_by_with_lease(self.worker_id)
                ]
                self.settle_previous_incarnation()
                return
            except guard.errors as exc:
                connection.close()
                guard.failed(exc)

    def settle_previous_incarnation(self) -> None:
        """Settle the earlier process's jobs whose leases have run out (fenced: a no-op for
        any rescued or settled meanwhile)."""
        if not self._previous:
            return
        held = {(job_id, fence): gone for job_id, fence, gone in selectors.held_by_with_lease(self.worker_id)}
        left = []
        for job_id, fence in self._previous:
            if (job_id, fence) not in held:
                continue  # settled or rescued meanwhile
            if not held[(job_id, fence)]:
                left.append((job_id, fence))
                continue
            log.warning("job_recovered_from_previous_incarnation", job_id=job_id, fence=fence)
            execution.fail_job(
                job_id,
                fence,
                "WorkerProcessDied: worker restarted: its previous process died",
                retry=True,
                error_class="queue_app.exceptions.WorkerProcessDied",
            )
        if left and left != self._previous:
            log.info("jobs_of_previous_incarnation_wait_for_their_leases", count=len(left))
        self._previous = left

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
        # Before the hand-backs below (see Producer.acknowledge_now).
        self.producer.acknowledge_now()
        for _ in range(20):
            try:
                self._flush_completions()
                for attempt in reversed(self.holdings.all()):  # last claimed first
                    execution.hand_back_job(
                        attempt.job.id,
                        attempt.job.fence,
                        worker_id=self.worker_id,
                        reason="worker stopped before running it",
                    )
                    self.holdings.settled(attempt)
                return
            except guard.errors as exc:
                connection.close()
                guard.failed(exc)
        held = [attempt.job.id for attempt in self.holdings.all()]
        log.error("worker_exit_with_unsettled_jobs", held=held, worker=self.worker_id)


class MainThread:
    """Runs a handler in the worker's main thread: a SIGALRM timer for the soft limit and
    the shutdown grace, SIGUSR1 to interrupt it when its attempt must stop."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def begin(self, attempt: Attempt, limit: float) -> None:
        worker = self.worker
        worker._limit = limit
        worker.current = attempt
        worker.soft_deadline = time.monotonic() + limit
        worker._hard_deadline = worker.soft_deadline + queue_settings().HARD_TIME_LIMIT_GRACE_SECONDS
        worker.tell_supervisor()
        worker._arm_timer()
        attempt.interrupt = worker.interrupt_main_thread
        if attempt.stop is not None:  # asked while it was being started
            worker.interrupt_main_thread()

    def call(self, attempt: Attempt, spec: HandlerSpec, executor: Executor) -> Any:
        worker = self.worker
        if spec.is_async:
            # Without slots a coroutine runs here on a loop of its own; SIGALRM's (or
            # SIGUSR1's) exception ends the loop, which cancels the coroutine.
            result = asyncio.run(spec.func(dict(attempt.job.payload)))
            worker._disarm()
            check_result(result)
            return result
        return executor.call_sync(attempt, spec, returned=worker._disarm)

    def end(self, attempt: Attempt) -> None:
        worker = self.worker
        worker._disarm()
        attempt.interrupt = None
        worker.current = None
        worker.tell_supervisor()

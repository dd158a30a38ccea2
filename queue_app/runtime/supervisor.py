"""Runs N worker processes, enforces hard time limits, and shuts them down cleanly.

Each child reports which job it runs and until when in memory shared with
the supervisor (``RunningJob``); which other jobs a dead child held (claimed,
not settled) the supervisor reads from PostgreSQL, by the child's worker
identity. A child still inside a handler past its hard deadline (the soft
limit plus a grace, e.g. C code that never returns to Python) is SIGKILLed:
its job is failed as a timeout, its other held jobs are handed back, and a
new child with the same identity takes its place.

A child that dies by itself while running a job (``os._exit``, a segfault,
the OOM killer's SIGKILL) has that attempt counted as failed, with the cause
in ``last_error``: the job retries or, out of attempts, fails. Handing it back
uncounted would let a job that kills its process be claimed forever. A child
with slots reports each slot job's hard deadline too: one past it gets the
child killed (that job fails as a timeout, the other running ones are handed
back); a child that dies by itself counts the attempt of every job it was
running, since any of them may be the one that killed it.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from django.db import connections

from queue_app.conf import queue_settings
from queue_app.engine import execution, selectors
from queue_app.exceptions import JobTimeLimitExceeded, WorkerProcessDied
from queue_app.observability.logs import get_logger
from queue_app.runtime.outages import OutageGuard
from queue_app.runtime.running_job import RunningJob
from queue_app.runtime.worker import STOP_SIGNALS, ChildReport
from queue_app.runtime.worker_name import WorkerNameInUse, WorkerNameLock

log = get_logger(__name__)

RESTART_BACKOFF_SECONDS = 1.0
# A child that stopped at its --max-jobs, its jobs settled: replaced at once.
RECYCLED_EXIT_CODE = 75
# How often the supervisor checks that the session holding its name's lock is alive.
NAME_CHECK_SECONDS = 5.0
PR_SET_PDEATHSIG = 1


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Child:
    index: int
    worker_id: str
    process: multiprocessing.Process | None = None
    pipe: Connection | None = None
    running: RunningJob | None = None
    # The job the child's main thread runs, as last read from ``running``.
    current: tuple[str, int] | None = None
    hard_deadline: float | None = None
    # Jobs running in slots: id -> (fence, hard deadline).
    slots: dict[str, tuple[int, float]] = field(default_factory=dict)
    exited_cleanly: bool = False


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this child when the supervisor dies (even by SIGKILL).

    Not SIGTERM, which would let it finish its job: once the supervisor is gone, its
    name is free, and a worker restarted under it settles the jobs the name holds (this
    child's running one too) and runs them again beside it. Killed, the child's jobs are
    settled by that restart, or rescued by the reconciler when their leases expire.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # elsewhere the worker notices the new parent pid on its next round


def _child_main(
    worker_id: str,
    queues: list[str],
    burst: bool,
    with_scheduled: bool,
    pipe: Connection,
    running: RunningJob,
    name_lock_fd: int | None,
    slots: int | None = None,
    max_jobs: int | None = None,
) -> None:
    from queue_app.runtime.worker import Worker

    _die_with_parent()
    if name_lock_fd is not None:
        # The name lock's session must end when the supervisor dies, not when the
        # last child (still finishing its job) lets go of an inherited socket.
        # Closing the descriptor sends nothing: the parent's session stays open.
        os.close(name_lock_fd)

    # Ctrl-C reaches the whole process group; the child treats it like SIGTERM.
    worker = Worker(
        worker_id=worker_id,
        queues=queues,
        burst=burst,
        with_scheduled=with_scheduled,
        supervisor_pipe=pipe,
        running=running,
        slots=slots,
        max_jobs=max_jobs,
    )
    code = 1
    try:
        worker.run()
        connections.close_all()
        code = RECYCLED_EXIT_CODE if worker.recycled and worker.stop_signal is None else 0
    except BaseException:  # noqa: BLE001 - reported as a crash would be, then the exit below
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # Not a return: multiprocessing would then wait for every non-daemon thread, and one
        # a handler started and left running would keep this process, and its place, for ever.
        os._exit(code)


class Supervisor:
    def __init__(
        self,
        *,
        name: str,
        queues: list[str],
        concurrency: int,
        burst: bool,
        with_scheduled: bool = False,
        slots: int | None = None,
        max_jobs: int | None = None,
    ) -> None:
        self.name = name
        self.slots = slots
        self.max_jobs = max_jobs
        self.queues = queues
        self.burst = burst
        self.with_scheduled = with_scheduled
        self.children = [Child(index=i, worker_id=f"{name}/{i}") for i in range(concurrency)]
        self.stopping = False
        self.stop_deadline: float | None = None
        # The signal that asked for the stop, until the loop has logged it (never the handler:
        # it may interrupt a log write, whose lock it would then wait on for ever).
        self._unlogged_stop: int | None = None
        self._context = multiprocessing.get_context("fork")
        self._name_lock = WorkerNameLock(name)
        self._name_checked = 0.0

    def _on_stop(self, signum, frame) -> None:
        if self.stopping:
            return
        self.stopping = True
        settings = queue_settings()
        self.stop_deadline = time.monotonic() + settings.SHUTDOWN_GRACE_SECONDS + 5
        self._unlogged_stop = signum
        for child in self.children:
            if child.process is not None and child.process.is_alive():
                os.kill(child.process.pid, signal.SIGTERM)

    def _log_stop(self) -> None:
        if self._unlogged_stop is not None:
            log.info("supervisor_stopping", name=self.name, signal=signal.Signals(self._unlogged_stop).name)
            self._unlogged_stop = None

    def _start(self, child: Child) -> None:
        # Forked children must not share the parent's database sockets or pool.
        for conn in connections.all(initialized_only=True):
            conn.close()
            close_pool = getattr(conn, "close_pool", None)
            if close_pool is not None:
                close_pool()
        parent_end, child_end = self._context.Pipe(duplex=False)
        child.running = RunningJob(self._context)
        child.process = self._context.Process(
            target=_child_main,
            args=(
                child.worker_id,
                self.queues,
                self.burst,
                self.with_scheduled,
                child_end,
                child.running,
                self._name_lock.fileno(),
                self.slots,
                self.max_jobs,
            ),
            name=f"worker {child.worker_id}",
        )
        # Until its worker has installed its own handlers, a forked child would run this
        # supervisor's stop handler on its copy of the supervisor. The stop signals stay
        # blocked across the fork; the worker unblocks them once its handlers are in, and a
        # stop that came meanwhile arrives then (the supervisor's own, just after start()).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            child.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        child_end.close()
        child.pipe = parent_end
        child.current, child.hard_deadline, child.slots = None, None, {}
        log.info("worker_process_started", worker=child.worker_id, pid=child.process.pid)

    def _take_name(self) -> bool:
        """Hold this worker name's lock; raises WorkerNameInUse if another worker has it.
        False when a stop signal came first (PostgreSQL was down meanwhile)."""
        guard = OutageGuard(f"supervisor {self.name}")
        while not self.stopping:
            try:
                self._name_lock.acquire()
                self._name_checked = time.monotonic()
                return True
            except guard.errors as exc:
                guard.failed(exc, sleep=self._pause)
        return False

    def _pause(self, seconds: float) -> None:
        """Sleep, cut short by a stop signal."""
        deadline = time.monotonic() + seconds
        while not self.stopping and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))

    def _keep_name(self) -> None:
        """After a PostgreSQL restart the lock's session is gone: take the lock again.
        If another worker took the name meanwhile, this one stops (its jobs go back)."""
        if time.monotonic() - self._name_checked < NAME_CHECK_SECONDS:
            return
        self._name_checked = time.monotonic()
        if self._name_lock.still_held():
            return
        try:
            self._name_lock.acquire()
            log.info("worker_name_lock_taken_again", name=self.name)
        except WorkerNameInUse:
            log.error("worker_name_in_use", name=self.name, action="stopping")
            self._on_stop(signal.SIGTERM, None)
        except OutageGuard.errors as exc:
            log.warning("worker_name_lock_unavailable", name=self.name, error=str(exc)[:300])

    def run(self) -> int:
        """Run until stopped (or, in burst mode, until every child is done). Raises
        WorkerNameInUse, before starting anything, if the name is taken."""
        # Signals first: a stop while PostgreSQL is down (the name lock waits for it) is a
        # clean stop too, not a death by SIGTERM.
        previous = {s: signal.signal(s, self._on_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            if self._take_name():
                self._supervise()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._log_stop()
            self._name_lock.release()
        log.info("supervisor_stopped", name=self.name)
        return 0

    def _supervise(self) -> None:
        """Start the children, then watch them until they are all done."""
        for child in self.children:
            self._start(child)
        while True:
            alive = [c for c in self.children if c.process is not None and c.process.is_alive()]
            if not alive and (self.stopping or all(c.exited_cleanly for c in self.children)):
                return
            self._log_stop()
            self._read_reports(timeout=0.2)
            self._enforce_hard_limits()
            self._reap()
            self._keep_name()
            if self.stopping and self.stop_deadline and time.monotonic() > self.stop_deadline:
                for child in alive:
                    self._kill(child, "shutdown grace period ended")

    def _read_reports(self, timeout: float) -> None:
        pipes = {c.pipe: c for c in self.children if c.pipe is not None}
        sentinels = [c.process.sentinel for c in self.children if c.process is not None]
        for ready in wait([*pipes, *sentinels], timeout=timeout):
            child = pipes.get(ready)
            if child is None:
                continue
            try:
                self._drain_reports(child)
            except (EOFError, OSError):
                child.pipe.close()
                child.pipe = None

    @staticmethod
    def _drain_reports(child: Child) -> None:
        while child.pipe is not None and child.pipe.poll():
            report: ChildReport = child.pipe.recv()
            child.slots = report.slots

    @staticmethod
    def _read_running(child: Child) -> None:
        if child.running is not None:
            child.current, child.hard_deadline = child.running.read()

    def _enforce_hard_limits(self) -> None:
        now = time.monotonic()
        for child in self.children:
            alive = child.process is not None and child.process.is_alive()
            if not alive:
                continue
            self._read_running(child)
            overdue = {job_id for job_id, (_, deadline) in child.slots.items() if now > deadline}
            if child.current and child.hard_deadline and now > child.hard_deadline:
                overdue.add(child.current[0])
            if overdue:
                self._kill(
                    child,
                    "hard time limit exceeded",
                    current_error=JobTimeLimitExceeded("hard time limit exceeded; process killed"),
                    charged=overdue,
                )

    def _kill(
        self,
        child: Child,
        reason: str,
        *,
        current_error: Exception | None = None,
        charged: set[str] | None = None,
    ) -> None:
        """SIGKILL a child and settle what it held, so nothing waits for a lease to expire.

        The running jobs in ``charged`` fail with ``current_error`` (their attempt counts);
        the others, and all of them when there is no error (the supervisor chose to stop
        it), are handed back uncounted."""
        if child.process is None:
            # Exited since the caller saw it alive, and already settled by _reap (a child
            # that died while the supervisor was stopping is not replaced).
            return
        log.warning("worker_process_killed", worker=child.worker_id, reason=reason, job=child.current)
        # It may have exited and been reaped since the caller saw it alive (e.g. the
        # supervisor was paused past its stop deadline while the child shut down).
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.process.pid, signal.SIGKILL)
        child.process.join()
        self._settle_child_jobs(child, reason=reason, current_error=current_error, charged=charged)

    def _settle_child_jobs(
        self,
        child: Child,
        *,
        reason: str,
        current_error: Exception | None,
        charged: set[str] | None = None,
    ) -> None:
        """Settle the jobs a dead child held: the running ones in ``charged`` (all running
        ones when None) failed with ``current_error`` (handed back when it is None), the
        other running and the claimed-but-unstarted ones handed back."""
        with contextlib.suppress(EOFError, OSError):
            self._drain_reports(child)  # its last words: which jobs run in slots
        self._read_running(child)
        running = {job_id: fence for job_id, (fence, _) in child.slots.items()}
        if child.current is not None:
            running[child.current[0]] = child.current[1]
        guard = OutageGuard("supervisor")
        for _ in range(5):
            try:
                # Latest enqueued first, running ones in their place: strict-FIFO jobs go
                # back to the head of their list in enqueue order.
                held = dict(selectors.held_by(child.worker_id))
                for job_id, fence in running.items():
                    if current_error is not None and (charged is None or job_id in charged):
                        held.pop(job_id, None)
                        execution.fail_job(
                            job_id,
                            fence,
                            execution.error_summary(current_error),
                            error_class=execution.error_class_path(current_error),
                        )
                    else:
                        held[job_id] = fence  # the fence the child ran it under
                for job_id, fence in held.items():
                    execution.hand_back_job(job_id, fence, worker_id=child.worker_id, reason=reason)
                break
            except guard.errors as exc:
                connections.close_all()
                guard.failed(exc)
        # Anything not settled here is still held by this identity: the replacement
        # child's start-up recovery settles it, or the reconciler after the lease.
        child.current, child.slots = None, {}
        if child.running is not None:
            child.running.set(None, None, None)  # the child is dead: nothing writes it now

    def _reap(self) -> None:
        for child in self.children:
            process = child.process
            if process is None or process.is_alive() or child.exited_cleanly:
                continue
            # Burst or not, a recycled child stopped at its job count, not because the work ran out.
            recycled = process.exitcode == RECYCLED_EXIT_CODE
            ended_well = process.exitcode == 0 or recycled
            if ended_well and (self.stopping or self.burst and not recycled):
                child.exited_cleanly = True
                continue
            if recycled:
                log.info("worker_process_recycled", worker=child.worker_id, pid=process.pid)
            elif process.exitcode != 0:
                log.warning("worker_process_exited", worker=child.worker_id, exitcode=process.exitcode)
                cause = _death_cause(process.exitcode)
                self._settle_child_jobs(
                    child,
                    reason=f"worker process {cause}",
                    current_error=WorkerProcessDied(f"the worker process {cause} while running this job"),
                )
            if child.pipe is not None:
                child.pipe.close()
                child.pipe = None
            if not recycled and not self.stopping:  # its jobs are settled: replaced at once
                time.sleep(RESTART_BACKOFF_SECONDS)
            # Checked after the back-off too: a child started once the stop has been sent
            # to the others would never get it.
            if self.stopping:
                child.process = None  # settled; nothing more to do for it
                continue
            self._start(child)


def _death_cause(exitcode: int | None) -> str:
    """How a process ended, for a job's last_error."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL:
            return f"was killed by {name} (the out-of-memory killer, or an operator)"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"

"""Slots: several I/O-bound jobs at once in one worker process.

A worker started with more than one slot runs handlers declared ``async def`` on
one event loop (its own thread) and sync handlers registered ``io_bound=True`` on
slot threads, up to N jobs at once. Other sync handlers still run in the main
thread, one at a time. Each slot job keeps what a main-thread job has:

- its own lease: it is in the worker's ``held`` map, which the heartbeat extends;
- its own fence: every completion, failure and hand-back is conditional on it;
- its own time limit. A coroutine is cancelled at its soft limit (``asyncio.timeout``)
  and the attempt fails as a timeout. A thread cannot be interrupted: past its soft
  limit ``check_time_limit()`` raises ``JobTimeLimitExceeded`` in the handler, and the
  supervisor, which is told every slot's hard deadline, kills the process when one
  passes (that job fails as a timeout, the others are handed back).

On shutdown the running slots get ``SHUTDOWN_GRACE_SECONDS`` to finish; coroutines
still running are then cancelled and handed back, and the worker hands back the
jobs of threads still running before the process exits (the fence rejects their
late completion).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from queue_app.conf import queue_settings
from queue_app.engine import execution
from queue_app.engine.execution import ClaimedJob, Completion
from queue_app.exceptions import JobTimeLimitExceeded
from queue_app.handlers import HandlerSpec, _current_job, _soft_deadline
from queue_app.observability.logs import get_logger
from queue_app.payloads import check_result

log = get_logger("queue_app.worker")

# After the grace period, how long cancelled coroutines get to hand their jobs back.
CANCEL_WAIT_SECONDS = 2.0


class _Fenced(Exception):
    """Rolls back an atomic handler whose completion the fence rejected."""


class _Exited(Exception):
    """Carries a coroutine's SystemExit or KeyboardInterrupt to its slot thread: asyncio
    re-raises those two out of the event loop, which would end it for every slot."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


@dataclass
class SlotJob:
    job: ClaimedJob
    spec: HandlerSpec
    late: bool
    hard_deadline: float | None = None
    future: concurrent.futures.Future | None = None
    cancelled_for: str = ""


class Slots:
    """Up to ``count`` jobs running beside the worker's main thread."""

    def __init__(self, worker: Any, count: int) -> None:
        # The worker: its id, its ``held`` map and ``lost`` set, ``_tell_supervisor``.
        self.worker = worker
        self.count = count
        self._running: dict[str, SlotJob] = {}
        self._changed = threading.Condition()
        self._waiting: queue.SimpleQueue[SlotJob] = queue.SimpleQueue()
        self._loop = asyncio.new_event_loop()
        # Daemon threads: a process past its shutdown grace exits without waiting for them.
        threading.Thread(target=self._loop.run_forever, name="slots event loop", daemon=True).start()
        for index in range(count):
            threading.Thread(target=self._serve, name=f"slot {index}", daemon=True).start()

    def free(self) -> int:
        with self._changed:
            return self.count - len(self._running)

    def wait_for_free(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: len(self._running) < self.count, timeout)

    def start(self, job: ClaimedJob, spec: HandlerSpec, *, late: bool) -> None:
        """Hand a claimed job to a free slot thread (the caller claimed no more than free())."""
        slot = SlotJob(job, spec, late)
        with self._changed:
            self._running[job.id] = slot
        self._waiting.put(slot)

    def deadlines(self) -> dict[str, tuple[int, float]]:
        """Running job id -> (fence, hard deadline): what the supervisor enforces."""
        with self._changed:
            return {
                job_id: (slot.job.fence, slot.hard_deadline)
                for job_id, slot in self._running.items()
                if slot.hard_deadline is not None
            }

    def cancel(self, job_ids: set[str], reason: str) -> None:
        """Cancel these jobs' coroutines (lease lost, shutdown); threads run on."""
        with self._changed:
            slots = [slot for job_id, slot in self._running.items() if job_id in job_ids]
        for slot in slots:
            if slot.future is not None:
                slot.cancelled_for = reason
                slot.future.cancel()

    def wait_idle(self, timeout: float) -> bool:
        """True once no slot runs a job; False if one still does after ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._running, timeout)

    def drain(self, grace_seconds: float) -> None:
        """Let running jobs finish within the grace; then cancel coroutines still running
        (they hand their jobs back). Jobs of threads still running stay in ``held``."""
        with self._changed:
            if self._changed.wait_for(lambda: not self._running, grace_seconds):
                return
            running = set(self._running)
        log.warning("slots_still_running_after_grace", worker=self.worker.worker_id, jobs=sorted(running))
        self.cancel(running, "worker shutdown grace period ended")
        with self._changed:
            self._changed.wait_for(
                lambda: not any(slot.future is not None for slot in self._running.values()),
                CANCEL_WAIT_SECONDS,
            )

    # --- in a slot thread ---------------------------------------------------

    def _serve(self) -> None:
        while True:
            slot = self._waiting.get()
            try:
                self._run(slot)
            except Exception as exc:  # noqa: BLE001 - a store error while settling
                # Not settled: the job keeps its lease until the heartbeat stops vouching
                # for it (below); then the reconciler rescues it and counts the attempt.
                log.warning("slot_job_not_settled", job_id=slot.job.id, error=str(exc)[:300])
                self.worker.held.pop(slot.job.id, None)
            finally:
                # Back to the pool: N slot threads must not pin N connections.
                connection.close()
                with self._changed:
                    self._running.pop(slot.job.id, None)
                    self._changed.notify_all()
                self.worker._tell_supervisor()

    def _run(self, slot: SlotJob) -> None:
        job, spec = slot.job, slot.spec
        limit = spec.time_limit or queue_settings().DEFAULT_TIME_LIMIT_SECONDS
        if slot.late:
            self.worker.record_late_start(job)
        soft_deadline = time.monotonic() + limit
        with self._changed:
            slot.hard_deadline = soft_deadline + queue_settings().HARD_TIME_LIMIT_GRACE_SECONDS
        self.worker._tell_supervisor()
        log.debug("job_started", job_id=job.id, type=job.type, attempt=job.attempt, slot=True)
        try:
            if spec.is_async:
                slot.future = asyncio.run_coroutine_threadsafe(
                    _run_coroutine(spec, job, limit, soft_deadline), self._loop
                )
                try:
                    result = slot.future.result()
                except _Exited as exited:
                    raise exited.original from None  # this job's failure, below
                check_result(result)
            else:
                result = self._run_in_thread(spec, job, soft_deadline)
        except _Fenced:
            execution.note_fenced(job.id, job.fence)
        except (concurrent.futures.CancelledError, asyncio.CancelledError) as exc:
            if not slot.cancelled_for:
                # The handler's own (a task it awaited was cancelled): its failure, counted.
                # Handed back, it would be claimed and run again at once, forever.
                self._fail_raised(job, exc, retry=True)
                return
            self._settle_cancelled(slot)
        except JobTimeLimitExceeded as exc:
            self._fail(
                job,
                f"JobTimeLimitExceeded: {exc}",
                retry=True,
                error_class="queue_app.exceptions.JobTimeLimitExceeded",
            )
        except BaseException as exc:  # noqa: BLE001 - however a handler ends, the attempt counts
            self._fail_raised(job, exc, retry=not isinstance(exc, spec.give_up_on))
        else:
            if result is not _ALREADY_COMPLETED:
                with transaction.atomic():
                    execution.complete_jobs([Completion(job.id, job.fence, result)])
            self.worker.held.pop(job.id, None)
        finally:
            slot.future = None

    def _run_in_thread(self, spec: HandlerSpec, job: ClaimedJob, soft_deadline: float) -> Any:
        job_token, deadline_token = _current_job.set(job), _soft_deadline.set(soft_deadline)
        try:
            if not spec.atomic:
                result = spec.func(dict(job.payload))
                check_result(result)
                return result
            # Atomic: the handler's writes commit with the completion, or not at all.
            with transaction.atomic():
                result = spec.func(dict(job.payload))
                check_result(result)
                if not execution.complete_jobs([Completion(job.id, job.fence, result)]):
                    raise _Fenced()
            return _ALREADY_COMPLETED
        finally:
            _current_job.reset(job_token)
            _soft_deadline.reset(deadline_token)

    def _settle_cancelled(self, slot: SlotJob) -> None:
        job = slot.job
        if job.id in self.worker.lost:
            # Cancelled or rescued meanwhile: the job is no longer ours to settle.
            log.warning("job_lease_lost", job_id=job.id, attempt=job.attempt)
            self.worker.held.pop(job.id, None)
            return
        self.worker._hand_back(job, slot.cancelled_for or "cancelled")

    def _fail_raised(self, job: ClaimedJob, exc: BaseException, *, retry: bool) -> None:
        self._fail(
            job,
            "".join(traceback.format_exception(exc)),
            retry=retry,
            error_class=execution.error_class_path(exc),
        )

    def _fail(self, job: ClaimedJob, error: str, *, retry: bool, error_class: str) -> None:
        # The handler may have closed or broken this thread's connection.
        if connection.connection is not None and not connection.is_usable():
            connection.close()
        execution.fail_job(job.id, job.fence, error, retry=retry, error_class=error_class)
        self.worker.held.pop(job.id, None)


_ALREADY_COMPLETED = object()


async def _run_coroutine(spec: HandlerSpec, job: ClaimedJob, limit: float, soft_deadline: float) -> Any:
    """Await the handler under its soft limit: past it, the coroutine is cancelled."""
    # This task runs in its own copy of the context: these values are its alone.
    _current_job.set(job)
    _soft_deadline.set(soft_deadline)
    timeout = asyncio.timeout(limit)
    try:
        async with timeout:
            return await spec.func(dict(job.payload))
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Exited(exc) from exc
    except TimeoutError:
        if timeout.expired():
            raise JobTimeLimitExceeded(f"time limit exceeded after {limit:g} s; cancelled") from None
        raise
